"""The zoo's fixtures: one checkpoint per LM family, trained on real text, and their manifest;
one trained encoder per row kind (mlm, rtd) with its rows file."""

import numpy as np
import pytest
import yaml
from gensim.test.utils import datapath
from zoo_helpers import (  # same folder: on sys.path
    LM_FAMILIES,
    VAL_BYTES,
    WINDOW,
    build,
    rows_dir,
    strided,
)

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


@pytest.fixture(scope="session")
def bert_rows_dir(tmp_path_factory):
    """A BERT trained on a short text and a rows file (zoo_helpers.rows_dir)."""
    return rows_dir(tmp_path_factory.mktemp("mlm"), "mlm")


@pytest.fixture(scope="session")
def electra_rows_dir(tmp_path_factory):
    """An ELECTRA trained on a short text and a rows file (zoo_helpers.rows_dir)."""
    return rows_dir(tmp_path_factory.mktemp("rtd"), "rtd")
