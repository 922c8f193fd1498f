"""The shipped SFT policy is unpacked where configs/generated expect it, checked against SHA256SUMS."""
from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from leap_jax.bootstrap import shipped_policy as sp


def _fake_artifact(folder: Path, payload: bytes, recorded: str | None = None) -> Path:
    """A policy.tar.gz holding policy/config.json = payload, and its SHA256SUMS (or a wrong sum)."""
    folder.mkdir(parents=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("policy/config.json")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    (folder / "policy.tar.gz").write_bytes(buf.getvalue())
    digest = recorded or hashlib.sha256(buf.getvalue()).hexdigest()
    (folder / "SHA256SUMS").write_text(f"{digest}  policy.tar.gz\n")
    return folder


def test_unpacks_the_shipped_path_once(tmp_path, monkeypatch):
    art = _fake_artifact(tmp_path / "art", b'{"model_type": "llama"}')
    monkeypatch.setattr(sp, "ARTIFACT_DIR", art)
    monkeypatch.chdir(tmp_path)
    logged: list[str] = []
    assert sp.ensure_shipped_policy("runs/gen/policy", log=logged.append) is True
    assert json.loads((tmp_path / "runs/gen/policy/config.json").read_text()) == {"model_type": "llama"}
    assert not list((tmp_path / "runs/gen").glob(".*unpacking"))
    assert len(logged) == 1 and "runs/gen/policy" in logged[0]
    assert sp.ensure_shipped_policy("./runs/gen/policy", log=logged.append) is False  # already there
    assert len(logged) == 1


def test_other_paths_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert sp.ensure_shipped_policy("models/mine") is False
    assert sp.ensure_shipped_policy(None) is False
    assert not (tmp_path / "models").exists()


def test_a_tarball_that_does_not_match_its_checksum_is_refused(tmp_path, monkeypatch):
    art = _fake_artifact(tmp_path / "art", b"{}", recorded="0" * 64)
    monkeypatch.setattr(sp, "ARTIFACT_DIR", art)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(sp.ShippedPolicyError, match="sha256"):
        sp.ensure_shipped_policy("runs/gen/policy", log=lambda s: None)
    assert not (tmp_path / "runs/gen/policy").exists()


def test_a_folder_without_config_is_named_not_overwritten(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/gen/policy").mkdir(parents=True)
    with pytest.raises(sp.ShippedPolicyError, match="holds no config.json"):
        sp.ensure_shipped_policy("runs/gen/policy")


def test_the_repository_artifact_matches_its_checksum_and_holds_a_policy():
    """The real tarball: its digest is the recorded one and it unpacks to an HF-style folder."""
    tarball = sp.ARTIFACT_DIR / "policy.tar.gz"
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == sp._expected_sha256(sp.ARTIFACT_DIR)
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert {"policy/config.json", "policy/tokenizer.json", "policy/model.safetensors.index.json"} <= names


class _StopBeforeTraining(Exception):
    pass


def test_main_unpacks_the_policy_a_generated_config_names(tmp_path, monkeypatch):
    """`python -m leap_jax.main --config configs/generated/grpo.yaml` on a fresh clone: the policy is there
    by the time the trainer is built (the trainer itself is replaced: only the order is under test)."""
    from leap_jax import main as main_mod
    from leap_jax.train import trainer as trainer_mod

    art = _fake_artifact(tmp_path / "art", b'{"model_type": "llama"}')
    monkeypatch.setattr(sp, "ARTIFACT_DIR", art)
    monkeypatch.chdir(tmp_path)
    seen = {}

    def fake_trainer(cfg, resume=False):
        seen["model_path"] = cfg.model.path
        seen["present"] = (tmp_path / cfg.model.path / "config.json").is_file()
        raise _StopBeforeTraining
    monkeypatch.setattr(trainer_mod, "Trainer", fake_trainer)
    config = Path(sp.REPO_ROOT) / "configs" / "generated" / "grpo.yaml"
    with pytest.raises(_StopBeforeTraining):
        main_mod.main(["--config", str(config), f"train.run_dir={tmp_path / 'run'}"])
    assert seen == {"model_path": "runs/gen/policy", "present": True}
