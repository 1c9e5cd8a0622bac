"""The model families. ``FAMILIES`` is the only list of them: ``tl_arch`` -> family module.

Every family module exposes the same names (the family contract): ``ARCH``,
``KIND``, ``Config`` (frozen dataclass of the model's shape, ``Config(**d)`` fails on unknown
keys), ``TrainConfig`` (frozen dataclass of the training settings: lr, batch size, schedule ...),
``Model`` (``model.train_cfg``: the settings it was trained with),
``train(cfg, data, *, seed, steps, progress=None, **settings) -> Model`` (``settings``: the
TrainConfig's fields), ``save(model, path)`` (config.json records both, as ``config`` and
``train_config``), ``load(path) -> Model`` and its kind's scoring hook (``token_nlls(model,
ids)`` for lm). An lm family scored in strided windows declares ``WINDOWED = True`` and its
``token_nlls`` takes ``ctx_len`` and ``stride`` (gpt, hf; :func:`tinyllm.windows.resolve_windows`
is the one rule for them).
``hf`` (a local Hugging Face causal LM) has no ``Config``, ``Model`` or ``train``: its models
are trained elsewhere; it loads, saves and scores them like any lm family.

No family imports :mod:`tinyllm.eval`: the instrument sits above them and reads their models
through duck-typed hooks (``hidden``, ``lm_head``, ``hidden_cached``; a Hugging Face model's
through :func:`tinyllm.models.hf.views`).
"""

from __future__ import annotations

from tinyllm.models import (
    bert,
    bigram,
    classifier,
    copy_baseline,
    electra,
    gpt,
    hf,
    ngram,
    nplm,
    rnnlm,
    seq2seq,
    transformer,
    word2vec,
)

FAMILIES: dict = {
    "bigram": bigram,
    "ngram": ngram,
    "nplm": nplm,
    "word2vec": word2vec,
    "rnnlm": rnnlm,
    "gpt": gpt,
    "hf": hf,
    "bert": bert,
    "electra": electra,
    "classifier": classifier,
    "seq2seq": seq2seq,
    "transformer": transformer,
    "copy": copy_baseline,
}
