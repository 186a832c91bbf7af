"""The multi-channel bot gateway: channels in, one pipeline, answers out."""

__version__ = "0.1.0"
