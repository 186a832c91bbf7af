"""The offline extractive responder: a LiteLLM provider that answers by quoting the extracts it is given,
so `make run` needs no key and no network."""
