"""The prefetch of the next start's files, bounded and recorded: a read larger than half of MemAvailable
is skipped with the numbers, a read still going when the start ends is stopped and says so, and the
files of a start are its model file or every file of its model folder (a hub name names none).
The run through a real design is in tests/test_phases.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.design import phases
from frankenstein.design.start import start_engine, stop_engine
from frankenstein.engines import adapter_for
from frankenstein.design.prefetch import MEMORY_SHARE, Prefetch, files_of, mem_available, resident_share


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_a_read_larger_than_memory_allows_is_skipped(tmp_path: Path) -> None:
    avail = mem_available()
    assert avail is not None and avail > 0
    big = _sparse(tmp_path / "huge.gguf", int(avail / MEMORY_SHARE) + (1 << 30))
    job = Prefetch([big], "block 2, candidate")
    job.begin()
    record = job.finish()
    assert record["bytes"] == 0 and record["bytes_wanted"] == big.stat().st_size
    assert record["skipped"].startswith(
        f"{big.stat().st_size / 2**30:.2f} GiB to read is more than 50% of MemAvailable"
    )


def test_a_read_still_going_when_the_start_ends_is_stopped(tmp_path: Path) -> None:
    avail = mem_available() or 0
    size = min(4 << 30, int(avail * MEMORY_SHARE) - (64 << 20))
    job = Prefetch([_sparse(tmp_path / "model.gguf", size)], "block 1, served")
    job.begin()
    record = job.finish()  # at once: the start is over
    assert record["skipped"] is None and record["stopped"] is True
    assert 0 <= record["bytes"] < size and record["seconds"] >= 0


def test_a_start_that_never_became_ready_read_nothing(tmp_path: Path) -> None:
    record = Prefetch([_sparse(tmp_path / "m.gguf", 1 << 20)], "block 1, served").finish()
    assert record["skipped"] == "the start never became ready" and record["bytes"] == 0


def test_the_files_of_a_start(tmp_path: Path) -> None:
    folder = tmp_path / "hf"
    (folder / "sub").mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "sub/tokenizer.json"):
        (folder / name).write_bytes(os.urandom(16))
    recipe = ResolvedRecipe(name="v", engine="vllm", model=str(folder), args=[], env={})
    assert [p.name for p in files_of(recipe)] == ["config.json", "model.safetensors", "tokenizer.json"]
    assert files_of(recipe.model_copy(update={"model": "Qwen/Qwen3-0.6B"})) == []  # a hub name
    assert files_of(recipe.model_copy(update={"command": ["serve", "{port}"]})) == []  # a user command
    gguf = _sparse(tmp_path / "t.gguf", 10)
    draft = _sparse(tmp_path / "d.gguf", 10)
    llama = ResolvedRecipe(name="l", engine="llamacpp", model=str(gguf), args=["-md", str(draft)], env={})
    assert files_of(llama) == [gguf.resolve(), draft.resolve()]


def _evicted(path: Path) -> Path:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return path


def test_the_prefetch_brings_the_files_into_the_page_cache(tmp_path: Path) -> None:
    """A real file on disk, evicted from the page cache (fadvise DONTNEED of that file only): mincore
    says none of it is cached; after the prefetch all of it is; a second prefetch reads nothing."""
    path = Path(os.environ.get("FRANK_TEST_DISK_DIR", str(Path(__file__).parent))) / f".prefetch-{os.getpid()}.bin"
    try:
        path.write_bytes(os.urandom(16 << 20))
        if (resident_share([_evicted(path)]) or 0.0) > 0.01:
            pytest.skip("this filesystem keeps the file's pages cached after DONTNEED (tmpfs?)")
        job = Prefetch([path], "block 2, candidate")
        job.begin()
        assert job.wait(60)
        record = job.finish()
        assert record["resident_before"] < 0.01 and record["resident_after"] == 1.0
        assert record["bytes"] == 16 << 20 and record["stopped"] is False
        again = Prefetch([path], "block 3, candidate")
        again.begin()
        assert again.finish()["skipped"] == "already in the page cache"
    finally:
        path.unlink(missing_ok=True)


@pytest.mark.real
def test_a_prefetched_model_launches_without_cold_reads(llama_server_bin: str, tmp_path: Path) -> None:
    """The real model (SmolLM2-135M Q4_1, 98 MB) on llama-server, alternating: evicted from the page cache
    (the cold disk reads a start pays when the other arm's start did not read its files) vs prefetched.
    Prints launch → ready of each; asserts what each start launched with (mincore)."""
    model = Path(
        os.environ.get("FRANK_REAL_MODEL") or Path.home() / ".cache/frankenstein/SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    if not model.is_file():
        pytest.fail(f"{model}: the real model is missing; run `make real-model`")
    # Its own copy: a file that another process maps (a llama-server started elsewhere on the machine on the
    # shared model) cannot be evicted from the page cache, so the test must not depend on who else runs.
    own = (
        Path(os.environ.get("FRANK_TEST_DISK_DIR", str(Path(__file__).parent))) / f".prefetch-model-{os.getpid()}.gguf"
    )
    try:
        shutil.copyfile(model, own)
        _alternate_starts(own, tmp_path)
    finally:
        own.unlink(missing_ok=True)


def _alternate_starts(model: Path, tmp_path: Path) -> None:
    recipe = ResolvedRecipe(
        name="real",
        engine="llamacpp",
        model=str(model),
        args=["--ctx-size", "512", "--threads", "1"],
        env={},
    )
    ready: dict[str, list[float]] = {"evicted": [], "prefetched": []}
    for _ in range(3):
        for how in ("evicted", "prefetched"):
            _evicted(model)
            if how == "prefetched":
                job = Prefetch([model], "next")
                job.begin()
                assert job.wait(120) and job.finish()["bytes"] == model.stat().st_size
            cached = resident_share([model])
            assert cached is not None and (cached < 0.01 if how == "evicted" else cached == 1.0)
            engine = adapter_for(recipe, tmp_path / "logs")
            with phases.recording() as rec:
                try:
                    start_engine(engine)
                finally:
                    stop_engine(engine)
            ready[how].append(rec.seconds["ready"])
    print(f"\nlaunch → ready (s): {ready}")
