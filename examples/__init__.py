"""The sample knowledge base (help-center/) and demo tools (tools/) of the made-up Acme Cloud Notes."""
