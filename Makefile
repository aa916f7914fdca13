# The two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo web web-node web-npm web-system web-chromium multi30k tatoeba multi30k-tatoeba distill test test-quick test-install test-oldest test-colab test-all test-slow lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The tests that import pretrained Marian checkpoints make them with transformers and PyTorch:
# a CPU build, from PyTorch's own index (PyPI's Linux wheel brings several GB of CUDA libraries).
TORCH ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[all,test]"
	$(BIN)/python -m pip install --quiet "$(TORCH)" --extra-index-url $(TORCH_INDEX)
	touch $(STAMP)

install: $(STAMP)

# The offline demo: train on the generated language pair, evaluate (runs/demo/metrics.json),
# export a SavedModel (runs/demo/export/1) and translate examples with it.
demo: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt train --config demo --workdir runs/demo
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt export saved-model --workdir runs/demo --out runs/demo/export --version 1 --overwrite
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt translate --model runs/demo/export/1 \
	  "the hungry boy sees 3 red cats" "yesterday a sad teacher gave an old book to the farmer" \
	  "the children will not sleep because the dogs watch 12 birds"

# The web page's tools, installed where missing: node and npm, then the page's JavaScript packages
# (keras_transformer/web/package-lock.json, `npm ci` once into ~/.cache/keras-transformer);
# for the tests, the Debian chromium (or $CHROMIUM) and puppeteer-core, which drives it.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
APT_INSTALL = $(SUDO) apt-get install -y $(1) || { $(SUDO) apt-get update && $(SUDO) apt-get install -y $(1); }
web-node:
	@command -v npm >/dev/null || { $(call APT_INSTALL,nodejs npm); }
web-npm: $(STAMP) web-node
	$(BIN)/python -c "from keras_transformer.web import install_node_modules; install_node_modules()"
# The browser test's system packages alone (no venv needed: .ci/run installs them beside it).
web-system: web-node
	@test -n "$$CHROMIUM" || command -v chromium >/dev/null || { $(call APT_INSTALL,chromium); }
web-chromium: web-system web-npm
	$(BIN)/python -c "from keras_transformer.web import install_node_modules; install_node_modules(dev=True)"

# The demo's translator as a web page that translates offline in the browser (LiteRT.js), built
# into runs/demo/web (the demo trained first where it is missing) and served on 127.0.0.1.
WEB_PORT ?= 8000
web: web-npm
	test -f runs/demo/model.keras || $(MAKE) demo
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt export web --workdir runs/demo --out runs/demo/web
	@echo "Serving runs/demo/web: open http://127.0.0.1:$(WEB_PORT)/ (Ctrl-C stops)."
	$(BIN)/python -m http.server $(WEB_PORT) --bind 127.0.0.1 --directory runs/demo/web

# The one-hour quality recipe on real data (../shared/corpora, not part of the quick start):
# train within a 57-minute budget, export with beam search, score test2016 with the SavedModel.
M30K ?= ../shared/corpora/multi30k_de_en
M30K_RUN ?= runs/multi30k
M30K_BEAM ?= 4
M30K_ALPHA ?= 1.4
# More training options for the recipes below, e.g. a budget in updates instead of minutes:
# make multi30k TRAIN_ARGS="--set training.max_minutes=null --set training.max_steps=6000"
TRAIN_ARGS ?=
# $(call score,RUN,DATA/SPLIT ...): score each DATA/SPLIT.src against DATA/SPLIT.tgt through
# RUN's SavedModel (RUN/export/1), beam and greedy, into RUN/SPLIT_beam.json and
# RUN/SPLIT_greedy.json: one kt evaluate, which loads the SavedModel once for all of them.
define score
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt evaluate --saved-model $(1)/export/1 \
	  --src $(addsuffix .src,$(2)) --ref $(addsuffix .tgt,$(2)) \
	  --out $(foreach set,$(2),$(1)/$(notdir $(set))_beam.json) \
	  --greedy-out $(foreach set,$(2),$(1)/$(notdir $(set))_greedy.json)
endef
# $(call export_and_score,RUN,DATA/SPLIT ...): export RUN with beam M30K_BEAM / M30K_ALPHA, then
# score.
define export_and_score
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt export saved-model --workdir $(1) --out $(1)/export \
	  --version 1 --beam $(M30K_BEAM) --alpha $(M30K_ALPHA) --overwrite
	$(call score,$(1),$(2))
endef
multi30k: $(STAMP)
	@test -f $(M30K)/test.src || { echo "$(M30K) not found: see ../shared/corpora/README.md"; exit 1; }
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt train --config multi30k --workdir $(M30K_RUN) $(TRAIN_ARGS)
	$(call export_and_score,$(M30K_RUN),$(M30K)/test)

# The same recipe on Tatoeba French → English (160k short pairs, no test split; train is stored
# sorted by length, so the whole split is shuffled, not a 10k window): valid is
# scored with the SavedModel; beam size and alpha are Multi30k's, nothing is tuned on this valid.
TATOEBA ?= ../shared/corpora/tatoeba_fr_en
TATOEBA_RUN ?= runs/tatoeba
tatoeba: $(STAMP)
	@test -f $(TATOEBA)/valid.src || { echo "$(TATOEBA) not found: see ../shared/corpora/README.md"; exit 1; }
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt train --config tatoeba --workdir $(TATOEBA_RUN) \
	  --set data.dir=$(TATOEBA) $(TRAIN_ARGS)
	$(call export_and_score,$(TATOEBA_RUN),$(TATOEBA)/valid)

# One many-to-one model, German and French → English, on both corpora with one shared vocabulary
# (docs/training.md, "Several corpora"): each corpus gives half the sampled pairs, no tags (the
# source language shows itself), early stopping on Multi30k's validation BLEU. It is scored on
# test2016 and on Tatoeba's valid, through one SavedModel, in one kt evaluate.
M30K_TATOEBA_RUN ?= runs/multi30k_tatoeba
multi30k-tatoeba: $(STAMP)
	@test -f $(M30K)/test.src || { echo "$(M30K) not found: see ../shared/corpora/README.md"; exit 1; }
	@test -f $(TATOEBA)/valid.src || { echo "$(TATOEBA) not found: see ../shared/corpora/README.md"; exit 1; }
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt train --config multi30k --workdir $(M30K_TATOEBA_RUN) \
	  --set 'data.sources=[{dir: $(M30K), weight: 1}, {dir: $(TATOEBA), weight: 1}]' \
	  --set training.shuffle_buffer=null --set training.early_stopping=bleu $(TRAIN_ARGS)
	$(call export_and_score,$(M30K_TATOEBA_RUN),$(M30K)/test $(TATOEBA)/valid)

# Sequence-level knowledge distillation (Kim & Rush 2016) into a student for a device
# (docs/training.md, "Distillation"). The teacher (TEACHER: a finished Multi30k run) translates
# $(M30K)/train.src with beam M30K_BEAM, α M30K_ALPHA (its SavedModel: exported first if it has
# none); the student (STUDENT_CONFIG: training/configs/student.yaml, or a YAML path) trains twice
# with one seed for STUDENT_STEPS updates: on the references (student_ref) and on those translations
# (student_kd; valid and test stay the human references). The students are exported to int8
# TFLite (student_ref to float as well, in the same process); the teacher's SavedModel (beam) is
# scored, then, in one process one after the other, the four TFLite files (the teacher's float
# one too) greedy in LiteRT, one thread, batch 1, on test2016 and on FLICKR2017.src/.tgt where
# they exist; benchmarks/distill_report.py writes DISTILL_RUN/distill.json and distill.md. Each
# step is skipped when its outputs are there: a re-run goes on where the last one stopped.
TEACHER ?= $(M30K_RUN)
DISTILL_RUN ?= runs/distill
STUDENT_CONFIG ?= student
STUDENT_STEPS ?= 4800
FLICKR2017 ?= $(M30K)/test2017
DISTILL_SETS = $(M30K)/test $(if $(wildcard $(FLICKR2017).src),$(FLICKR2017))
# The TFLite files scored (DISTILL_RUN/NAME.tflite), each with the run it was exported from.
DISTILL_TFLITE = teacher student_ref student_ref.int8 student_kd.int8
DISTILL_TFLITE_RUNS = $(TEACHER) $(addprefix $(DISTILL_RUN)/,student_ref student_ref student_kd)
define newline


endef
# $(call distill_scores,NAMES): the score files of NAMES, DISTILL_RUN/scores/NAME.SET.json for
# each of DISTILL_SETS.
distill_scores = $(foreach name,$(1),$(patsubst %,$(DISTILL_RUN)/scores/$(name).%.json,$(notdir $(DISTILL_SETS))))
# $(call distill_unless,FILES): a shell command's beginning that runs the rest of the line
# only where one of FILES is not there yet.
distill_unless = $(foreach file,$(1),test -f $(file) &&) true || TF_CPP_MIN_LOG_LEVEL=3
# $(call distill_student,NAME,DATA): train the student on DATA into DISTILL_RUN/NAME.
define distill_student
	test -f $(DISTILL_RUN)/$(1)/metrics.json || TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt train \
	  --config $(STUDENT_CONFIG) --workdir $(DISTILL_RUN)/$(1) --set data.dir=$(2) \
	  --set training.max_steps=$(STUDENT_STEPS)
endef
distill: $(STAMP)
	@test -f $(M30K)/train.src || { echo "$(M30K) not found: see ../shared/corpora/README.md"; exit 1; }
	@test -f $(TEACHER)/model.keras || { \
	  echo "$(TEACHER) holds no trained teacher: run make multi30k, or set TEACHER"; exit 1; }
	mkdir -p $(DISTILL_RUN)/data $(DISTILL_RUN)/scores
	test -d $(TEACHER)/export/1 || TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt export saved-model \
	  --workdir $(TEACHER) --out $(TEACHER)/export --version 1 --beam $(M30K_BEAM) --alpha $(M30K_ALPHA)
	$(call distill_unless,$(call distill_scores,teacher.saved_model)) $(BIN)/kt evaluate \
	  --saved-model $(TEACHER)/export/1 --src $(DISTILL_SETS:=.src) \
	  --ref $(DISTILL_SETS:=.tgt) --out $(call distill_scores,teacher.saved_model)
	test -f $(DISTILL_RUN)/teacher.tflite || TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt export tflite \
	  --workdir $(TEACHER) --out $(DISTILL_RUN)/teacher.tflite
	$(foreach file,train.src valid.src valid.tgt test.src test.tgt,test -L \
	  $(DISTILL_RUN)/data/$(file) || ln -s $(abspath $(M30K))/$(file) $(DISTILL_RUN)/data/$(file)$(newline))
	test "$$(grep -c '' $(DISTILL_RUN)/data/train.tgt 2>/dev/null)" = \
	  "$$(grep -c '' $(M30K)/train.src)" || TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt translate-corpus \
	  --model $(TEACHER)/export/1 --beam $(M30K_BEAM) \
	  --src $(M30K)/train.src --out $(DISTILL_RUN)/data/train.tgt
	$(call distill_student,student_ref,$(M30K))
	$(call distill_unless,$(addprefix $(DISTILL_RUN)/,student_ref.tflite student_ref.int8.tflite)) \
	  $(BIN)/kt export tflite --workdir $(DISTILL_RUN)/student_ref \
	  --out $(DISTILL_RUN)/student_ref.tflite --int8-out $(DISTILL_RUN)/student_ref.int8.tflite
	$(call distill_student,student_kd,$(DISTILL_RUN)/data)
	test -f $(DISTILL_RUN)/student_kd.int8.tflite || TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/kt export tflite \
	  --workdir $(DISTILL_RUN)/student_kd --out $(DISTILL_RUN)/student_kd.int8.tflite \
	  --quantize dynamic
	$(call distill_unless,$(call distill_scores,$(DISTILL_TFLITE))) $(BIN)/kt evaluate \
	  --tflite $(DISTILL_TFLITE:%=$(DISTILL_RUN)/%.tflite) \
	  --workdir $(DISTILL_TFLITE_RUNS) --src $(DISTILL_SETS:=.src) --ref $(DISTILL_SETS:=.tgt) \
	  --out $(call distill_scores,$(DISTILL_TFLITE))
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m benchmarks.distill_report --run $(DISTILL_RUN) \
	  --teacher $(TEACHER)

# Default suite: tiny models, seconds per test (CI runs this), in TEST_WORKERS processes
# (pytest-xdist), each test module in one of them so that its fixtures are built once; more
# workers suit a machine with more cores.
TEST_WORKERS ?= 2
PARALLEL := -n $(TEST_WORKERS) --dist loadscope
# The tiers are pytest markers (pyproject.toml): `install` and `colab_runtime` build or change
# virtual environments and run in their own jobs; `programs` marks what needs the checkout's
# programs or the extras (the library suite is the rest); `quick` the edit-run loop's tier;
# `runtime` what moves with the TensorFlow/Keras versions (the Colab-runtime job's tier).
# --durations=15: the slowest tests close the run's output (.ci/run's summary repeats them).
OWN_JOBS := not install and not colab_runtime
# tests/test_web.py runs the demo's page in headless Chromium: web-chromium installs its tools.
test: $(STAMP) web-chromium
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m pytest -m "not slow and $(OWN_JOBS)" -q $(PARALLEL) \
	  --durations=15

# The quick tier for the edit-run loop (under ~2 min on 2 cores).
test-quick: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m pytest -m "quick and not slow and not xla_cpu and $(OWN_JOBS)" -q

# The package as users install it: a fresh clone, `pip install` without extras into a clean venv,
# used from outside the checkout (tests/test_install.py; .ci/run runs it after `make test`).
test-install: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m pytest -m install -q

# The TPU install path (tensorflow-tpu 2.20) with the oldest Keras allowed, in a fresh temp venv.
test-oldest:
	PYTHON=$(PYTHON) TEST_WORKERS=$(TEST_WORKERS) .ci/tpu_path

# Colab's runtime (TensorFlow 2.19.0, Keras 3.10.0, TF Text 2.19.0) in a fresh temp venv: the
# notebook's own install cell, the runtime kept (RECORD), the notebook, and the library's runtime
# tier.
test-colab:
	PYTHON=$(PYTHON) TEST_WORKERS=$(TEST_WORKERS) .ci/colab_runtime

# Slow or data-heavy checks (real corpora in ../shared/corpora), opt-in.
test-slow: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m pytest -m "slow and $(OWN_JOBS)" -q $(PARALLEL)

test-all: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/python -m pytest -m "not colab_runtime" -q

# ruff (pyproject.toml's [tool.ruff]): the lint rules, and the formatting checked, on the whole tree.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Rewrite the tree in ruff's format and apply its safe fixes.
format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache build dist *.egg-info
