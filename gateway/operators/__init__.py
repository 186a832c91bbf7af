"""Operator surfaces: the REST API, the web console, the Slack operator channel, and their helpers."""
