"""Runnable examples of cortex_sessions as an agent runtime's session store (docs/design.md §13).

Each example uses a scripted model, so it needs no network and no API key. Run them from the
repository root after ``python manage.py migrate``::

    python -m example_project.runtimes.openai_agents_example
    python -m example_project.runtimes.adk_example
"""
