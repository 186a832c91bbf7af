"""The multi-channel bot gateway: channels in, one pipeline, answers out."""


def __getattr__(name: str) -> str:
    # `__version__` read when asked for: importlib.metadata at import took the console script's first
    # milliseconds, where a Ctrl-C was a traceback (`gateway.console`).
    if name != "__version__":
        raise AttributeError(f"module 'gateway' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bot-gateway")  # pyproject.toml's, as installed (`make setup`, the Docker image)
    except PackageNotFoundError:  # a checkout run without being installed
        return "0+unknown"
