"""The zoo's fixture: one checkpoint per LM family, trained on real text, and their manifest."""

import numpy as np
import pytest
import yaml
from gensim.test.utils import datapath
from zoo_helpers import LM_FAMILIES, VAL_BYTES, WINDOW, build, strided  # same folder: on sys.path

from tinyllm.models import FAMILIES
from tinyllm.tokens import write_tokens


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory):
    """A folder with train/val token files, one checkpoint per LM family, and their manifest."""
    d = tmp_path_factory.mktemp("zoo")
    text = np.fromfile(datapath("lee_background.cor"), dtype=np.uint8)
    write_tokens(d / "data" / "val.tok", text[-VAL_BYTES:])
    train_ids = text[:20_000]
    entries = []
    for arch in LM_FAMILIES:
        ckpt = build(arch, d / "models" / arch, train_ids)
        e = {
            "name": arch,
            "family": arch,
            "checkpoint": ckpt.relative_to(d).as_posix(),
            "data": "data/val.tok",
        }
        if strided(FAMILIES[arch]):
            e["options"] = dict(WINDOW)
        entries.append(e)
    (d / "zoo.yaml").write_text(yaml.safe_dump({"suite": "zoo", "entries": entries}))
    return d
