# make demo  - README's first command: a virtual environment (.venv) with the demo extras, a
#              migrated SQLite database, demo users and DEMO_CONVERSATIONS real Chit-Chat
#              conversations, then the example project on DEMO_ADDRESS. Safe to run again.
# make test  - README's test command, `pytest`, in .venv with the test extra (the core suite;
#              the tests of the other extras skip: pip install -e ".[dev]" for all of them).
PYTHON ?= python3
VENV ?= .venv
DEMO_CONVERSATIONS ?= 300
DEMO_ADDRESS ?= 127.0.0.1:8000
BIN := $(VENV)/bin

.PHONY: demo demo-setup test

demo: demo-setup
	$(BIN)/python manage.py runserver $(DEMO_ADDRESS)

demo-setup: $(VENV)/.installed-demo
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py demo_setup --conversations $(DEMO_CONVERSATIONS) --base-url http://$(DEMO_ADDRESS)

test: $(VENV)/.installed-test
	PATH="$(abspath $(BIN)):$$PATH" pytest

$(VENV)/.installed-demo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[demo]"
	touch $@

$(VENV)/.installed-test: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@
