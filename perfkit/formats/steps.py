"""Placeholder: being written."""

from __future__ import annotations

import pandas as pd


def derive_steps(op_events: pd.DataFrame, step_times: pd.DataFrame | None) -> tuple[pd.DataFrame, str]:
    return pd.DataFrame(), "unknown"
