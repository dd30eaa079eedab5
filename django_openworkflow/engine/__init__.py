"""The replay engine: executes slices of claimed runs, knows nothing of dispatch."""
