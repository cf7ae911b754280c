"""The screen's copy of the target (_screen_copy): what it runs, with what environment, where it fits, and how a
real round's cost is fitted from its requests and turned into a correction of production's batch times."""
from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmfleet.specdec.plugins.module_utils.screen import _screen, _screen_copy
from ansible_collections.llmfleet.specdec.plugins.module_utils.systemd._procview import ProcView

PROD = ["/opt/llama/bin/llama-server", "-m", "/srv/m.gguf", "--host", "0.0.0.0", "--port", "8093", "-t", "6",
        "-fa", "on", "-c", "32768", "-np", "4", "--api-key", "s3cret", "--spec-type", "draft-simple",
        "-md", "/srv/d.gguf", "--spec-draft-n-max", "8", "--metrics", "-b", "512", "--some-new-flag"]


def test_the_copy_runs_productions_arguments_without_its_port_keys_model_or_speculation() -> None:
    args = _screen_copy.copy_args(PROD, "/srv/m.gguf", 41234, _screen_copy.ngram_spec(16))
    assert args[0] == PROD[0]
    kept = args[1:args.index("-m")]
    assert kept == ["-t", "6", "-fa", "on", "-b", "512", "--some-new-flag"]
    for gone in ("s3cret", "0.0.0.0", "8093", "/srv/d.gguf", "32768", "draft-simple", "--metrics"):
        assert gone not in args, gone
    tail = args[args.index("-m"):]
    assert tail[:6] == ["-m", "/srv/m.gguf", "--host", "127.0.0.1", "--port", "41234"]
    assert tail[tail.index("--spec-type") + 1] == "ngram-mod"
    assert tail[tail.index("--spec-ngram-mod-n-max") + 1] == "16"
    assert tail[tail.index("-np") + 1] == "1"


def test_every_draft_and_speculation_option_of_the_pinned_tree_is_dropped_from_the_copy() -> None:
    from ansible_collections.llmfleet.specdec.plugins.module_utils.llamacpp import _flags

    spec = [opt for opt in _flags.OPTIONS if any("draft" in n or n.startswith("--spec") for n in opt.names)]
    assert len(spec) > 20
    assert [opt.canonical for opt in spec if not _screen_copy._dropped(opt)] == []
    assert not _screen_copy._dropped(_flags.option("--threads"))


def test_a_draft_candidate_runs_on_the_copy_with_its_own_stopping_rules() -> None:
    assert _screen_copy.draft_spec("/srv/d.gguf", 8) == [
        "--spec-type", "draft-simple", "--spec-draft-model", "/srv/d.gguf", "--spec-draft-n-max", "8"]
    assert _screen_copy.draft_spec("/srv/d.gguf", 4, 0.5, 2)[-4:] == ["--spec-draft-p-min", "0.5",
                                                                      "--spec-draft-n-min", "2"]
    args = _screen_copy.copy_args(PROD, "/srv/m.gguf", 41234, _screen_copy.draft_spec("/srv/d2.gguf", 1))
    assert "/srv/d.gguf" not in args and args[-5:] == ["draft-simple", "--spec-draft-model", "/srv/d2.gguf",
                                                       "--spec-draft-n-max", "1"]


def test_the_copy_keeps_productions_llama_settings_and_runtime_but_no_secret_or_listener() -> None:
    env = _screen_copy.copy_env({
        "LLAMA_ARG_THREADS": "6", "LLAMA_ARG_FLASH_ATTN": "on", "LLAMA_ARG_PORT": "8093", "LLAMA_ARG_HOST": "0.0.0.0",
        "LLAMA_API_KEY": "s3cret", "LLAMA_ARG_API_KEY_FILE": "/etc/k", "LLAMA_ARG_SPEC_TYPE": "draft-simple",
        "LLAMA_ARG_SPEC_DRAFT_MODEL": "/srv/d.gguf", "LLAMA_ARG_MODEL": "/srv/m.gguf", "LLAMA_ARG_CTX_SIZE": "32768",
        "PATH": "/usr/bin", "HOME": "/root", "HOMEBREW_TOKEN": "t", "OMP_NUM_THREADS": "6", "GGML_CUDA_X": "1",
        "HF_TOKEN": "hf_x", "AWS_SECRET_ACCESS_KEY": "k", "LD_LIBRARY_PATH": "/opt/lib", "LANG": "C.UTF-8",
        "OMP_BAD": "a\nb"})
    assert env == {"LLAMA_ARG_THREADS": "6", "LLAMA_ARG_FLASH_ATTN": "on", "PATH": "/usr/bin", "HOME": "/root",
                   "OMP_NUM_THREADS": "6", "GGML_CUDA_X": "1", "LD_LIBRARY_PATH": "/opt/lib", "LANG": "C.UTF-8"}


def test_a_copy_fits_only_without_gpu_with_the_model_readable_and_memory_for_it(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"\0" * (1 << 20))
    need = int(1.25 * (1 << 20)) + (512 << 20)
    assert _screen_copy.fits(str(model), need, []) is None
    assert "needs about" in _screen_copy.fits(str(model), need - 1, [])
    # with a draft model beside it, the draft's size counts too
    assert "needs about" in _screen_copy.fits(str(model), need, [], extra=1 << 20)
    assert _screen_copy.fits(str(model), need + int(1.25 * (1 << 20)), [], extra=1 << 20) is None
    assert "GPU devices (/dev/nvidia0)" in _screen_copy.fits(str(model), need, ["/dev/nvidia0"])
    assert "not readable here" in _screen_copy.fits(str(tmp_path / "gone.gguf"), need, [])
    assert "not in /props" in _screen_copy.fits(None, need, [])
    assert "MemAvailable" in _screen_copy.fits(str(model), None, [])
    assert _screen_copy.meminfo_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n") == 2048 * 1024
    assert _screen_copy.meminfo_available("MemTotal: 100 kB\n") is None


def test_gpu_nodes_are_found_under_a_root(tmp_path: Path) -> None:
    assert _screen_copy.gpu_nodes(str(tmp_path)) == []
    (tmp_path / "dev" / "dri").mkdir(parents=True)
    (tmp_path / "dev" / "dri" / "renderD128").write_text("")
    (tmp_path / "dev" / "dri" / "card0").write_text("")
    assert _screen_copy.gpu_nodes(str(tmp_path)) == [str(tmp_path / "dev" / "dri" / "renderD128")]


def test_a_requests_steps_and_rows_from_its_timings() -> None:
    # 33 tokens: the first from the prefill, 20 accepted in rounds, so 12 steps; they verified 12 + 30 rows
    assert _screen_copy.request_point({"predicted_n": 33, "predicted_ms": 60.0, "draft_n": 30,
                                       "draft_n_accepted": 20}) == (12, 42, 60.0)
    assert _screen_copy.request_point({"predicted_n": 10, "predicted_ms": 9.0}) == (9, 9, 9.0)
    assert _screen_copy.request_point({"predicted_n": 1, "predicted_ms": 1.0}) is None
    assert _screen_copy.request_point({"predicted_n": 5, "predicted_ms": 1.0, "draft_n": 1, "draft_n_accepted": 3}) is None
    assert _screen_copy.request_point({"predicted_ms": 1.0}) is None


def test_the_fit_recovers_a_rounds_fixed_cost_and_its_cost_per_row() -> None:
    points = [(s, r, 0.8 * s + 0.05 * r) for s, r in [(10, 10), (12, 42), (30, 45), (8, 70), (20, 21)]]
    per_round, per_row = _screen_copy.fit(points)
    assert per_round == pytest.approx(0.8) and per_row == pytest.approx(0.05)
    # every request with the same rows per step: the two costs cannot be told apart
    assert _screen_copy.fit([(10, 20, 5.0), (20, 40, 10.0)]) is None
    assert _screen_copy.fit([]) is None
    # a negative fixed cost is not a cost: all of it goes to the rows
    per_round, per_row = _screen_copy.fit([(10, 10, 1.0), (10, 100, 30.0)])
    assert per_round == 0.0 and per_row > 0
    draws = _screen_copy.bootstrap(points, seed=1, n=50)
    assert len(draws) == 50 and all(r == pytest.approx(0.8) for r, _w in draws)


def test_corrections_are_the_fitted_round_over_the_copys_own_batch() -> None:
    got = _screen_copy.corrections(1.0, 0.1, {1: 0.55, 5: 1.5, 9: 0.0})
    assert got == {1: pytest.approx(2.0), 5: pytest.approx(1.0)}


def _proc_tree(root: Path, port: int, argv: list[str], exe: str | None) -> None:
    (root / "net").mkdir(parents=True)
    line = f"   0: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1"
    (root / "net" / "tcp").write_text("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
                                      "   uid  timeout inode\n" + line + "\n")
    (root / "net" / "tcp6").write_text("header\n")
    pid = root / "4242"
    (pid / "fd").mkdir(parents=True)
    (pid / "fd" / "3").symlink_to("socket:[777]")
    (pid / "cmdline").write_text("\0".join(argv) + "\0")
    (pid / "comm").write_text(Path(argv[0]).name[:15] + "\n")
    (pid / "environ").write_text("LLAMA_ARG_THREADS=2\0PATH=/usr/bin\0")
    if exe:
        (pid / "exe").symlink_to(exe)


def test_production_is_found_by_its_port_and_must_be_llama_server(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("")
    _proc_tree(tmp_path / "proc", 8093, [str(binary), "-m", "/m.gguf"], str(binary))
    argv, env, exe = _screen_copy.production_process(8093, ProcView(str(tmp_path / "proc")))
    assert argv == [str(binary), "-m", "/m.gguf"] and env["LLAMA_ARG_THREADS"] == "2" and exe == str(binary)
    assert "no single process listens on production's port 8094" in _screen_copy.production_process(
        8094, ProcView(str(tmp_path / "proc")))
    _proc_tree(tmp_path / "proc2", 8093, ["/usr/sbin/nginx", "-g", "daemon off;"], "/usr/sbin/nginx")
    assert "is not llama-server" in _screen_copy.production_process(8093, ProcView(str(tmp_path / "proc2")))


def test_no_copy_where_it_does_not_fit_and_nothing_is_started(tmp_path: Path) -> None:
    out = _screen_copy.run_copy(8093, str(tmp_path / "gone.gguf"), [], [1, 2, 3], meminfo="MemAvailable: 1 kB\n",
                                root=str(tmp_path))
    assert out == {"used": False, "why": f"production's model file ({tmp_path / 'gone.gguf'}) is not readable here"}


def test_a_correction_slows_the_prediction_by_its_factor() -> None:
    result = {"k": 2, "requests": [[(2, 2), (2, 1), (0, 0)]] * 4}
    verify = {1: [1.0], 3: [2.0]}
    plain = _screen.predict(result, [1.0], verify, [], {}, 0)
    doubled = _screen.predict(result, [1.0], verify, [], {}, 0, correction={1: 2.0, 3: 2.0},
                              corrections=[{1: 2.0, 3: 2.0}])
    # 4 requests x 6 tokens: two rounds of 3 rows (2 ms each, 4 ms corrected) and one plain 1 ms step
    assert plain["predicted_tok_s"] == pytest.approx(1000 * 6 / 5.0)
    assert doubled["predicted_tok_s"] == pytest.approx(1000 * 6 / 9.0)
    assert doubled["low"] == doubled["high"] == pytest.approx(doubled["predicted_tok_s"])


def test_a_drafter_timed_in_the_servers_rounds_replaces_the_side_servers_steps() -> None:
    result = {"k": 2, "requests": [[(2, 2), (2, 1), (0, 0)]] * 4}
    verify = {1: [1.0], 3: [2.0]}
    side = _screen.predict(result, [1.0], verify, [0.1], {1: 0.1, 3: 0.1}, 1)
    timed = _screen.predict(result, [1.0], verify, [0.1], {1: 0.1, 3: 0.1}, 1, drafter=(0.5, 0.25),
                            drafters=[(0.5, 0.25)])
    # per round: 2 ms verification + 0.5 + 2 x 0.25 drafter = 3 ms; two rounds and a 1 ms step per request
    assert timed["predicted_tok_s"] == pytest.approx(1000 * 6 / 7.0)
    assert side["predicted_tok_s"] > timed["predicted_tok_s"]
    assert timed["low"] == timed["high"] == pytest.approx(timed["predicted_tok_s"])


def test_a_drafter_the_copy_could_not_time_keeps_its_side_servers_steps() -> None:
    plan = {"name": "d", "chain": ["draft-simple"]}
    replays = {2: {"k": 2, "requests": [[(2, 2), (2, 1), (0, 0)]] * 4, "rounds": 8, "drafted": 16, "accepted": 12,
                   "mean_accepted_len": 2.5, "acceptance": 0.75, "accept_per_pos": [1.0, 0.5]}}
    prod = {"step_ms": [1.0], "tok_s": 1000.0}
    copy = {"used": True, "corrections": {1: 1.0, 3: 1.0}, "draws": [],
            "drafters": {"d": {"why": "the copy did not serve with the draft"}}}
    args = (plan, replays, prod, {1: [1.0], 3: [2.0]}, [0.1], {1: 0.1, 3: 0.1}, 0)
    without = _screen._timed(*args, copy)["2"]
    assert without["predicted_tok_s"] == pytest.approx(_screen._timed(*args, None)["2"]["predicted_tok_s"])
    copy["drafters"]["d"] = {"fit": [0.5, 0.25], "draws": [], "requests": 4}
    assert _screen._timed(*args, copy)["2"]["predicted_tok_s"] == pytest.approx(1000 * 6 / 7.0)


def test_the_grid_times_every_batch_up_to_the_deepest_and_each_k_plus_one() -> None:
    assert _screen.verify_grid([]) == []
    assert _screen.verify_grid([2, 4]) == [1, 2, 3, 4, 5]
    assert _screen.verify_grid([64]) == [*range(1, 18), 65]


def test_verify_copy_takes_auto_or_never() -> None:
    with pytest.raises(_screen.ScreenError, match="verify_copy: 'always' is not auto or never"):
        _screen.run_screen("http://127.0.0.1:9", [{"name": "a"}], verify_copy="always")


def test_a_fit_with_a_negative_or_zero_cost_is_never_used_and_says_why() -> None:
    # what was left for a drafter after the target's fitted rounds on a busy copy: less than nothing per round
    rest = [(10, 10, -600.0), (12, 30, -560.0), (20, 40, -1200.0), (8, 30, -400.0)]
    assert _screen_copy.fit(rest) is None
    got, why = _screen_copy.fit_why(rest)
    assert got is None and "negative or zero cost" in why and "not used" in why
    # every fit the bootstrap keeps is a cost: none negative
    mixed = [(10, 10, 5.0), (12, 30, -3.0), (20, 40, 9.0), (8, 30, 1.0), (15, 20, 7.0)]
    assert all(r >= 0 and w >= 0 and r + w > 0 for r, w in _screen_copy.bootstrap(mixed, seed=3, n=100))
    _none, degenerate = _screen_copy.fit_why([(10, 20, 5.0), (20, 40, 10.0)])
    assert "cannot separate" in degenerate


def test_the_copys_correction_is_not_stretched_past_the_rounds_it_fitted() -> None:
    batches = {5: 10.0, 17: 20.0, 49: 40.0, 65: 50.0}
    stretched = _screen_copy.corrections(2.0, 1.0, batches)
    clamped = _screen_copy.corrections(2.0, 1.0, batches, max_rows=17)
    assert clamped[5] == stretched[5] and clamped[17] == stretched[17] == pytest.approx(19.0 / 20.0)
    # above 17 rows the round's extra ms at 17 (19 - 20 = -1) is added to the batch, not 2 + 1 x 65 over 50
    assert stretched[65] == pytest.approx(67.0 / 50.0)
    assert clamped[65] == pytest.approx(49.0 / 50.0) and clamped[49] == pytest.approx(39.0 / 40.0)
