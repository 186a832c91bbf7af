"""Channel adapters: verify, parse, render and send for each messaging platform."""
