"""The example project's one-command demo: real Chit-Chat conversations imported as sessions."""
