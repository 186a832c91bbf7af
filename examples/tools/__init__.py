"""Demo tools for the sample bot. Each module exports an async callable, `DESCRIPTION` and `PARAMETERS`."""
