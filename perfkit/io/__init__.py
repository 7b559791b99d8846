"""The io layer: finding a run's folders (discovery), the reader of each on-disk layout (io/formats), the choice
among profiler cycles (cycles), assembling a Run (assembly) and loading it (loader), the cache, parallel and Dask
reading, and the trace index behind the timeline (timeline, trace_json, trace_text). Imports only perfkit.core."""
