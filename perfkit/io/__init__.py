"""The io layer: finding a run's folders, the reader of each on-disk layout (io/formats), assembling a Run, the
cache, parallel and Dask reading, and the trace index behind the timeline. Imports only perfkit.core."""
