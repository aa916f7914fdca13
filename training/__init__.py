"""The training program: ``python -m training.train --config demo --workdir DIR``."""
