"""The multi-channel bot gateway: channels in, one pipeline, answers out."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("bot-gateway")  # pyproject.toml's, as installed (`make setup`, the Docker image)
except PackageNotFoundError:  # a checkout run without being installed
    __version__ = "0+unknown"
