"""Servers a launcher starts, probes it runs, waits and asserts (issue 29): each fixture in
upstream's style is checked against what it launches when run under stand-ins, and each
guard against the launcher that shows the gap it closes."""

from __future__ import annotations

import socket
import sys
import textwrap
import time

import pytest
from support import LAUNCHERS

from miles_topology.judging.check_launcher import check_python
from miles_topology.model.errors import InputError
from miles_topology.pylaunch import read_python_launcher, read_python_launches
from miles_topology.pylaunch.cluster import ClusterModel, _plain
from miles_topology.pylaunch.servers import Polls, served

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux's")

UP = {"PYTHONPATH": str(LAUNCHERS / "upstream")}  # the stand-in miles helpers


def fixture(name: str) -> str:
    return str(LAUNCHERS / name)


def write(tmp_path, text: str) -> str:
    path = tmp_path / "run.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


def argv_after(words: list[str], flag: str) -> str:
    return words[words.index(flag) + 1]


# ---------------------------------------------------------------- which ports a command serves


@pytest.mark.parametrize(("command", "ports"), [
    ("setsid mooncake_master --rpc_port 50051 --metrics_port 0", [("--rpc_port", 50051)]),
    ("python3 -m sglang.launch_server --model-path m --host 0.0.0.0 --port 30001",
     [("--port", 30001)]),
    ("python3 -m sglang.launch_server --model-path m", [("default", 30000)]),
    ("ray start --head --num-gpus 8 --dashboard-port=8266",
     [("--dashboard-port", 8266), ("default", 6379)]),
    ("etcd --listen-client-urls http://0.0.0.0:2379", [("--listen-client-urls", 2379)]),
    # clients of a server elsewhere, and the training launch, serve nothing here
    ("ray start --address=10.0.0.1:6379 --num-gpus 8", []),
    ("torchrun --nnodes 2 --master-port 23456 convert.py", []),
    ("python3 train.py --sglang-router-port 3000 --port 5", []),
    ("ray job submit --address=http://127.0.0.1:8265 -- python3 train.py", []),
])
def test_the_ports_a_command_serves(command, ports):
    assert served(command.split()) == ports


def test_a_wait_is_the_same_poll_with_only_sleeps_between():
    polls = Polls(times=3)
    for _ in range(2):
        polls.sleep()
        assert not polls.seen("probe")
    polls.other()  # another command between: a config loop, not a wait
    for _ in range(2):
        polls.sleep()
        assert not polls.seen("probe")
    polls.sleep()
    assert polls.seen("probe")
    assert not Polls(times=2).seen("x")


def test_python_code_quoted_for_dash_c_is_plain_shell():
    assert _plain("""python3 -c "import ray; print(ray.cluster_resources().get('GPU', 0))" """)
    assert not _plain('python3 -c "print($X)"') and not _plain("(cd /x && ls)")
    assert _plain("echo '$HOME (x)'") and not _plain("echo 'open")
    ran, probed = ClusterModel.of({}).answer(None, "python3 -c 'print(1)' | wc -l",
                                        lambda args: ("8\n", 0))
    assert ran.stdout.strip() == "1" and probed


# ---------------------------------------------------------------- servers answered


def test_a_mooncake_master_started_and_polled_before_the_job():
    """miles' short e2e tests: execute_train(before_ray_job_submit=start_mooncake_master)
    timed out at 10 s recording no launch; the master's port is now answered."""
    got = read_python_launcher(fixture("test_short_mooncake.py"), [], UP)
    assert got.launcher == "ray job submit" and got.seconds < 5
    assert argv_after(got.argv, "--object-store-backend") == "mooncake"
    (master,) = [s for s in got.servers if s["server"] == "mooncake_master"]
    assert (master["port"], master["flag"], master["polls"]) == (50051, "--rpc_port", 1)
    # its first look (is one running already?) came before the start: refused
    connects = [(o.kind, o.command) for o in got.others if o.kind.startswith("socket.")]
    assert connects[0] == ("socket.create_connection", "127.0.0.1:50051")
    assert connects[1:] == [("socket.connect", "127.0.0.1:50051")]


def test_http_health_polls_get_200_and_the_report_names_each_server():
    v = check_python(fixture("run_router_health.py"), [])
    lines = v.extra["report_lines"]
    line = next(x for x in lines if x.startswith("servers modelled"))
    assert "`sglang_router.launch_router` at 127.0.0.1:30100 (--port; connected 1x)" in line
    assert "`reward_server.py` at 127.0.0.1:8123 (the port the launcher polls" in line
    assert v.extra["argv"][-2:] == ["--sglang-router-port", "30100"]


def test_nothing_outside_the_namespace_is_reachable(tmp_path):
    """A launcher starts a server on the port of a listener this machine has: its connect is
    answered inside the namespace; past the recorders (the C method) the same port, and any
    other, is refused by the kernel. This machine's listener sees nothing."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    path = write(tmp_path, f"""
        import socket, subprocess
        subprocess.Popen(["python3", "-m", "sglang.launch_server", "--port", "{port}"])
        with socket.create_connection(("127.0.0.1", {port})) as s:
            s.sendall(b"GET /health HTTP/1.0\\r\\n\\r\\n")
            said = s.recv(100).split(b" ")[1].decode()
        raw = []
        for p in ({port}, {port} + 1):
            try:
                socket.socket.__bases__[0].connect(socket.socket(), ("127.0.0.1", p))
                raw.append("connected")
            except OSError as e:
                raw.append("refused")
        subprocess.run(["python3", "train.py", "--said", said, "--raw", ",".join(raw)])
    """)
    try:
        got = read_python_launcher(path, [])
        time.sleep(0.05)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected here
    finally:
        listener.close()
    assert got.argv == ["--said", "200", "--raw", "refused,refused"]
    assert [(s["server"], s["port"], s["polls"]) for s in got.servers] == \
        [("sglang.launch_server", port, 1)]


def test_a_port_no_command_serves_is_a_wait_named_at_once(tmp_path):
    path = write(tmp_path, """
        import socket, time
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", 18080), timeout=1).close()
                break
            except OSError:
                time.sleep(2)
        import subprocess
        subprocess.run("python3 train.py --colocate", shell=True)
    """)
    t0 = time.perf_counter()
    with pytest.raises(InputError) as e:
        read_python_launcher(path, [])
    assert "waits for a server at 127.0.0.1:18080, which none of its recorded commands " \
        "serves" in str(e.value)
    assert time.perf_counter() - t0 < 8  # not the 10 s wall limit


# ---------------------------------------------------------------- probes and the cluster


def test_a_ray_probe_in_a_python_subprocess_prints_the_modelled_gpus():
    """p2p-weight-transfer's run.py on two nodes: without a cluster that size it would wait
    for ever; the message says what to pass, and with it the job is launched."""
    with pytest.raises(InputError) as e:
        read_python_launcher(fixture("run_p2p_wait_gpus.py"), ["Qwen3-30B-A3B-2node"])
    msg = str(e.value)
    assert "waits for the cluster to change" in msg
    assert "(1 node(s) x 8 GPUs) answered `8` each time" in msg
    assert "--nodes N --gpus-per-node N" in msg
    got = read_python_launcher(fixture("run_p2p_wait_gpus.py"), ["Qwen3-30B-A3B-2node"],
                               cluster=ClusterModel.of({"nodes": 2}))
    assert argv_after(got.argv, "--tensor-model-parallel-size") == "4"
    assert [p["answer"] for p in got.probes] == ["cluster"]
    assert got.seconds < 5


def test_a_python_probe_runs_only_when_its_output_is_read(tmp_path):
    path = write(tmp_path, """
        import subprocess
        out = subprocess.check_output(["python3", "-c",
                                       "import torch; print(torch.cuda.device_count())"])
        subprocess.run(["python3", "-c", "import sys; sys.exit(3)"], check=True)
        subprocess.run(["python3", "train.py", "--actor-num-gpus-per-node", out.decode().strip()])
    """)
    got = read_python_launcher(path, [], cluster=ClusterModel.of({"gpus_per_node": 4}))
    assert got.argv == ["--actor-num-gpus-per-node", "4"]


def test_ctypes_is_the_kernels_to_refuse():
    """miles' fault-tolerance e2e tests load libc through ctypes (fault_injector.py); the
    audit hook refused ctypes.dlsym before the kernel sandbox could."""
    got = read_python_launcher(fixture("test_ft_fault_injector.py"), [], UP)
    assert "--use-fault-tolerance" in got.argv
    assert not [o for o in got.others if o.kind.startswith("refused")]


def test_a_cluster_size_assert_names_the_options_to_pass():
    with pytest.raises(InputError) as e:
        read_python_launches(fixture("run_disagg_nodes.py"), ["--train-num-nodes", "1"], UP)
    msg = str(e.value)
    assert "train_num_nodes (1) must be less than num_nodes (1)" in msg
    assert "--train-num-nodes (1), --num-nodes (1)" in msg and "\n" not in msg
    (got,) = read_python_launches(fixture("run_disagg_nodes.py"), ["--num-nodes", "3"], UP)
    assert argv_after(got.argv, "--rollout-num-gpus") == "16"


def test_an_assert_on_other_values_is_reported_as_before(tmp_path):
    path = write(tmp_path, "import argparse\np = argparse.ArgumentParser()\n"
                 "p.add_argument('--lr', type=float, default=1.0)\nargs = p.parse_args()\n"
                 "assert args.lr < 0.5, 'lr too big'\n")
    with pytest.raises(InputError) as e:
        read_python_launcher(path, [])
    assert "the launcher failed before it launched training" in str(e.value)


def test_a_missing_api_key_says_what_to_give(tmp_path):
    with pytest.raises(InputError) as e:
        read_python_launcher(fixture("run_daytona_key.py"), [], UP)
    msg = str(e.value)
    assert "(~/.config/daytona/api_key;" in msg and "miles-topology-launcher" not in msg
    assert "--env DAYTONA_API_KEY=..." in msg and "\n" not in msg
    got = read_python_launcher(fixture("run_daytona_key.py"), [],
                               {**UP, "DAYTONA_API_KEY": "dtn_x"})
    assert got.launcher == "ray job submit"


def test_sleeps_of_a_poll_end_at_once(tmp_path):
    path = write(tmp_path, """
        import time, subprocess
        t0 = time.time()
        time.sleep(120)
        assert time.time() - t0 >= 120
        subprocess.run(["python3", "train.py", "--colocate"])
    """)
    got = read_python_launcher(path, [])
    assert got.argv == ["--colocate"] and got.seconds < 5


def test_four_commands_and_the_multi_lora_entry_is_the_training_launch():
    """run_multi_lora.py: 4 typer commands, 3 launch train_multi_lora_async.py (none was
    recognised as the training launch)."""
    got = read_python_launches(fixture("run_multi_lora_app.py"), [], UP)
    assert [(g.command, g.entry.rsplit("/", 1)[-1]) for g in got] == [
        ("train", "train_multi_lora_async.py"), ("full-train", "train_multi_lora_async.py"),
        ("serve", "train_multi_lora_async.py")]
    assert any("command `prepare`: no training launch" in n for n in got[0].notes)
    assert argv_after(got[0].argv, "--multi-lora-n-adapters") == "2"


def test_trusted_the_servers_are_answered_on_this_machines_loopback():
    got = read_python_launcher(fixture("run_router_health.py"), [], trust=True)
    assert [(s["port"], s["polls"]) for s in got.servers] == [(30100, 1), (8123, 1)]


def test_an_assert_naming_an_unset_variable_says_to_give_it(tmp_path):
    path = write(tmp_path, "import os\nassert os.environ.get('DAYTONA_API_KEY'), "
                 "'DAYTONA_API_KEY must be set in the environment'\n")
    with pytest.raises(InputError) as e:
        read_python_launcher(path, [])
    assert str(e.value).endswith("(give --env DAYTONA_API_KEY=...)")


def test_a_sleep_command_between_polls_is_a_sleep(tmp_path):
    path = write(tmp_path, """
        import socket, subprocess, time
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", 18081)).close()
                break
            except OSError:
                subprocess.run(["sleep", "2"])
    """)
    with pytest.raises(InputError) as e:
        read_python_launcher(path, [])
    assert "waits for a server at 127.0.0.1:18081" in str(e.value)
