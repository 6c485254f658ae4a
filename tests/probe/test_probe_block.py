"""Units per backend call in detection (issue 21): at the default chunk size the hf backend gets as many as fill its
batches (`HFBackend.score_block`), an explicit run.chunk_size is kept, and the records do not depend on either."""

from zcp.config.groups import RunConfig
from zcp.core.items import Item
from zcp.probe.detect import DetectDataset, DetectSettings, detect, probe_block
from zcp.probe.prompts import ProbeConfig


class _Plain:
    """A backend without a preferred block (an API engine, a wrapper)."""


def _backend(rows: int):
    from zcp.backends.hf import HFBackend
    from zcp.core.testing import tiny_llama, train_tokenizer

    texts = [f"Tom has {k + 3} apples and buys {2 * k + 1} more. How many apples? {3 * k + 4}" for k in range(40)]
    tok = train_tokenizer(texts * 3, vocab_size=300)
    return HFBackend(tiny_llama(tok, seed=1), tok, max_batch_size=rows)


def test_probe_block_default_explicit_and_other_backends():
    default = RunConfig.chunk_size
    backend = _backend(rows=256)
    assert backend.score_block == 4 * 256
    assert probe_block(backend, default) == 1024
    assert probe_block(backend, 8) == 8 and probe_block(backend, 5000) == 5000  # an explicit size is kept
    assert probe_block(_backend(rows=4), default) == default  # batches the default chunk already fills
    assert probe_block(_Plain(), default) == default


def test_default_block_makes_fewer_calls_and_the_same_records(tmp_path):
    items = [Item(f"i{k}", f"Tom has {k + 3} apples and buys {2 * k + 1} more. How many apples?", str(3 * k + 4))
             for k in range(40)]
    ref = {it.id: [Item(f"{it.id}::r0", f"Tom has {k + 5} apples and buys {2 * k + 1} more. How many apples?",
                        str(3 * k + 6), metadata={"original_id": it.id})] for k, it in enumerate(items)}
    probe = ProbeConfig(metrics=("p_first", "p_all"))
    calls: dict[str, list[int]] = {}
    runs = {}
    for name, chunk in (("default", RunConfig.chunk_size), ("chunk7", 7)):
        backend = _backend(rows=64)  # score_block 256: the 80 units in one call at the default chunk size
        score = backend.score
        calls[name] = []

        def counted(requests, _score=score, _calls=calls[name]):
            _calls.append(len(requests))
            return _score(requests)

        backend.score = counted
        out = tmp_path / name
        runs[name] = detect(backend, [DetectDataset("D", items, ref)], probe, out,
                            DetectSettings(seeds=[0], bootstrap_samples=200, chunk_size=chunk, progress=False))
    assert calls["default"] == [80]
    assert calls["chunk7"] == [7] * 11 + [3]
    assert (tmp_path / "default" / "records.jsonl").read_bytes() == (tmp_path / "chunk7" / "records.jsonl").read_bytes()
    assert runs["default"]["results"] == runs["chunk7"]["results"]
