"""Prints the requirements that installed packages name and nobody installed, for the Dockerfile's second pip step.

requirements.txt installs with --no-deps, as frozen on a later Python 3.11; an older 3.11 (Debian's 3.11.2) needs
backports its markers name (redis: async-timeout before 3.11.3). Left out on purpose: PyTorch's family in the CPU
image, and whatever the data-only model packages declare (installed with --no-deps: they ship weights, not code).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

from packaging.requirements import Requirement

LEFT_OUT = re.compile(r"torch|torchaudio|torchcodec|triton|nvidia-.*|cuda-.*|llama-cpp-python")


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def missing(models_file: str) -> set[str]:
    with open(models_file) as lines:
        models = {normal(line.split("==")[0]) for line in lines if line.strip() and not line.startswith("#")}
    installed = {normal(dist.metadata["Name"]) for dist in metadata.distributions()}
    found = set()
    for dist in metadata.distributions():
        if normal(dist.metadata["Name"]) in models:
            continue
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            name = normal(requirement.name)
            if name not in installed and not LEFT_OUT.fullmatch(name):
                found.add(name)
    return found


if __name__ == "__main__":
    print(" ".join(sorted(missing(sys.argv[1]))))
