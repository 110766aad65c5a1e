# Short names. Each target sets itself up (tools/setup.sh is idempotent and fast when done).
SHELL := /bin/bash
VENV  := .venv/bin
GPUS  ?=

.PHONY: setup gpu-setup book test lab reproduce check-html clean

setup:
	@tools/setup.sh

## gpu-setup: on a GPU machine, .venv with Transformer Engine 2.11.0 built against the installed CUDA torch
## (pip --no-build-isolation, as NVIDIA documents it) and Megatron Core 0.16.1; DRY=1 prints the plan only
gpu-setup:
	@tools/gpu-setup.sh $(if $(DRY),--dry-run)

## book: execute every chapter from the recorded results (cached) and render the HTML book
book: setup
	@tools/mathjax-setup.sh   # MathJax for the HTML book, served from _static (offline like plotly.js)
	$(VENV)/megalab reproduce --mode cached
	$(VENV)/jupyter-book build . -W --keep-going
	@echo "open _build/html/index.html"

## test: the lib's tests, the whole book executed from records, the HTML checked in a real browser
test: setup
	tools/browser-setup.sh    # Chromium first: tests/test_lab.py drives JupyterLab in it
	$(VENV)/python -m pytest
	$(MAKE) book
	$(VENV)/python tools/check_html.py _build/html

## lab: JupyterLab on the book, with the megalab kernel, widgets and jupyterlab-myst (the prose's {eval}
## numbers, folded Solutions; installed by setup from pyproject.toml); on this machine only (127.0.0.1),
## and as root too (containers and GPU hosts often log in as root; jupyter refuses root without --allow-root)
LAB_FLAGS := --ServerApp.ip=127.0.0.1 $(if $(filter 0,$(shell id -u)),--allow-root)
lab: setup
	$(VENV)/jupyter lab book/ $(LAB_FLAGS)

## reproduce: run every chapter live on this machine's GPUs (records what is missing), then build
reproduce: setup
	$(VENV)/megalab reproduce --mode live $(if $(GPUS),--gpus $(GPUS))
	$(VENV)/jupyter-book build . -W --keep-going

clean:
	rm -rf _build
