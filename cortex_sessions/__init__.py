"""cortex_sessions: scoped AI-agent conversation sessions for Django (see docs/design.md)."""

__version__ = "0.1.0.dev0"
