"""cortex_sessions: scoped AI-agent conversation sessions for Django (see DESIGN.md)."""

__version__ = "0.1.0.dev0"
