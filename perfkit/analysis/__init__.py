"""The analysis layer: pure functions of a Run: the step ledger, measures, Cells, FLOP rates, communication
split, cluster questions and step statistics. Imports only perfkit.core and perfkit.io."""
