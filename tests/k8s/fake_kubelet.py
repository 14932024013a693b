#!/usr/bin/python3
"""Description: a fake kubelet for cudaw-k8s-plugin, speaking the real device plugin API
(v1beta1, gRPC over unix sockets in a temporary folder), with Debian's python3-grpcio.

 1. The plugin starts before the kubelet: it waits (a missing socket is no crash), then
    registers: version v1beta1, endpoint cudaw-gpu-share.sock, resource cudaw.io/gpu-share,
    preferred allocation offered.
 2. ListAndWatch lists 4 shares x 2 GPUs, all Healthy.
 3. Allocate of 1 and of 3 shares answers CDI names (nvidia.com/gpu=<gpu> and cudaw's share
    device), and the spec `cudaw cdi generate` writes for the same node gives that device
    CUDAW_MEM_LIMIT = shares x memory / 4. GetPreferredAllocation packs onto one GPU.
 4. Bad input: a malformed Allocate (bytes that are no message), an unknown device id, an
    empty request: each a clear gRPC error, and the plugin still answers afterwards.
 5. A GPU lost (its /dev/nvidia<gpu> gone): ListAndWatch sends its 4 shares Unhealthy, and
    Allocate on it is refused.
 6. The kubelet restarts (its socket removed and re-created, the plugin's socket removed as the
    kubelet does): the plugin registers again, and answers on its new socket.
 7. With --cdi off: the same allocation answers mounts and environment instead
    (CUDAW_MEM_LIMIT, LD_PRELOAD, CUDAW_SHARE=1, cudawd's socket, NVIDIA_VISIBLE_DEVICES).

usage: fake_kubelet.py PLUGIN CUDAW_CDI PROTOC PROTO      exit 0 pass, 1 fail, 77 skipped
"""
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent import futures

try:
    import grpc
except ImportError:
    print("skipped: python3-grpcio is not installed (apt-get install python3-grpcio python3-protobuf)")
    sys.exit(77)

plugin_bin, cdi_bin, protoc, proto = sys.argv[1:5]
tmp = tempfile.mkdtemp(prefix="cudaw-k8s.")
subprocess.run([protoc, "-I", os.path.dirname(proto), "--python_out=" + tmp, proto], check=True)
sys.path.insert(0, tmp)
import deviceplugin_pb2 as pb  # noqa: E402  (generated just above)

GIB = 1 << 30
MEMORY = 8 * GIB
SHARES = 4
sockets = os.path.join(tmp, "device-plugins")
devdir = os.path.join(tmp, "dev")
os.makedirs(sockets)
os.makedirs(devdir)
for g in (0, 1):
    open(os.path.join(devdir, "nvidia%d" % g), "w").close()
kubelet_sock = os.path.join(sockets, "kubelet.sock")
endpoint = os.path.join(sockets, "cudaw-gpu-share.sock")
failed = False
plugin = None
log_path = os.path.join(tmp, "plugin.log")


def fail(message):
    print("FAIL:", message)
    if os.path.exists(log_path):
        print("--- plugin log ---\n" + open(log_path).read())
    if plugin:
        plugin.kill()
    sys.exit(1)


def check(cond, message):
    if not cond:
        fail(message)


class Kubelet:
    """The Registration service on kubelet.sock; every request lands in a queue."""

    def __init__(self):
        self.registered = queue.Queue()
        handler = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                self.register, request_deserializer=pb.RegisterRequest.FromString,
                response_serializer=pb.Empty.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.server.add_insecure_port("unix://" + kubelet_sock)
        self.server.start()

    def register(self, request, context):
        self.registered.put(request)
        return pb.Empty()

    def expect_register(self, seconds):
        try:
            request = self.registered.get(timeout=seconds)
        except queue.Empty:
            fail("the plugin did not register within %d s" % seconds)
        check(request.version == "v1beta1", "Register version %r" % request.version)
        check(request.endpoint == "cudaw-gpu-share.sock", "Register endpoint %r" % request.endpoint)
        check(request.resource_name == "cudaw.io/gpu-share", "resource %r" % request.resource_name)
        check(request.options.get_preferred_allocation_available, "preferred allocation not offered")
        return request

    def stop(self):
        self.server.stop(0).wait()


class Plugin:
    """A client of the plugin's DevicePlugin service."""

    def __init__(self):
        self.channel = grpc.insecure_channel("unix://" + endpoint)
        grpc.channel_ready_future(self.channel).result(timeout=10)

    def call(self, method, request, response_type):
        rpc = self.channel.unary_unary("/v1beta1.DevicePlugin/" + method,
                                       request_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
                                       response_deserializer=response_type.FromString)
        return rpc(request, timeout=10)

    def watch(self):
        rpc = self.channel.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                                        request_serializer=pb.Empty.SerializeToString,
                                        response_deserializer=pb.ListAndWatchResponse.FromString)
        return rpc(pb.Empty(), timeout=60)

    def allocate(self, *containers):
        request = pb.AllocateRequest()
        for ids in containers:
            request.container_requests.add().devices_ids.extend(ids)
        return self.call("Allocate", request, pb.AllocateResponse)


def start_plugin(*extra):
    global plugin
    plugin = subprocess.Popen([plugin_bin, "--socket-dir", sockets, "--libdir", "/opt/cudaw/lib/cudaw",
                               "--gpus", "2", "--memory", "8G", "--shares", str(SHARES),
                               "--dev-dir", devdir, *extra],
                              stdout=open(log_path, "a"), stderr=subprocess.STDOUT)


def expect_error(what, thunk, code, words):
    try:
        thunk()
    except grpc.RpcError as e:
        check(e.code() == code, "%s: code %s, expected %s (%s)" % (what, e.code(), code, e.details()))
        check(words in (e.details() or ""), "%s: %r lacks %r" % (what, e.details(), words))
        print("refused as expected: %s: %s" % (what, e.details()))
        return
    fail("%s was accepted" % what)


def spec_limit(device):
    """CUDAW_MEM_LIMIT of a cudaw.io/gpu device in the spec cudaw cdi generate writes."""
    out = subprocess.run([cdi_bin, "--libdir", "/opt/cudaw/lib/cudaw", "generate", "--gpus", "2",
                          "--memory", "8G", "--shares", str(SHARES), "--real-cudart", "none"],
                         check=True, capture_output=True, text=True).stdout
    for d in json.loads(out)["devices"]:
        if d["name"] == device:
            for e in d["containerEdits"]["env"]:
                if e.startswith("CUDAW_MEM_LIMIT="):
                    return int(e.split("=", 1)[1])
    fail("the spec has no device %s with a memory limit" % device)


try:
    # 1. The plugin first, no kubelet yet.
    start_plugin()
    time.sleep(1.0)
    check(plugin.poll() is None, "the plugin exited without a kubelet socket")
    check("no kubelet socket" in open(log_path).read(), "no word about the missing kubelet socket")
    kubelet = Kubelet()
    kubelet.expect_register(10)
    client = Plugin()
    options = client.call("GetDevicePluginOptions", pb.Empty(), pb.DevicePluginOptions)
    check(options.get_preferred_allocation_available and not options.pre_start_required, "options")

    # 2. The devices.
    stream = client.watch()
    first = next(stream)
    ids = [d.ID for d in first.devices]
    check(len(ids) == 2 * SHARES and len(set(ids)) == len(ids), "ListAndWatch: %r" % ids)
    check(all(d.health == "Healthy" for d in first.devices), "not all Healthy")

    # 3. Allocate 1 and 3 shares, in one request (two containers).
    answer = client.allocate(["gpu1-share0"], ["gpu0-share1", "gpu0-share2", "gpu0-share3"])
    check(len(answer.container_responses) == 2, "two containers, %d answers" % len(answer.container_responses))
    for response, (gpu, k) in zip(answer.container_responses, ((1, 1), (0, 3))):
        names = [c.name for c in response.cdi_devices]
        mine = "%d-share-%d" % (gpu, SHARES) if k == 1 else "%d-shares-%d-of-%d" % (gpu, k, SHARES)
        check(names == ["nvidia.com/gpu=%d" % gpu, "cudaw.io/gpu=" + mine], "CDI names %r" % names)
        limit = spec_limit(mine)
        check(limit == k * MEMORY // SHARES, "%s: CUDAW_MEM_LIMIT %d, expected %d" % (mine, limit, k * MEMORY // SHARES))
        print("allocated %d share(s) of GPU %d: %s, CUDAW_MEM_LIMIT=%d" % (k, gpu, names, limit))
    request = pb.PreferredAllocationRequest()
    r = request.container_requests.add()
    r.available_deviceIDs.extend(ids)
    r.must_include_deviceIDs.append("gpu1-share3")
    r.allocation_size = 3
    preferred = client.call("GetPreferredAllocation", request, pb.PreferredAllocationResponse)
    chosen = list(preferred.container_responses[0].deviceIDs)
    check(len(chosen) == 3 and "gpu1-share3" in chosen and all(c.startswith("gpu1-") for c in chosen),
          "preferred %r" % chosen)

    # 4. Bad input.
    expect_error("a malformed Allocate", lambda: client.call("Allocate", b"\xff\xff\xff\x07garbage", pb.AllocateResponse),
                 grpc.StatusCode.INVALID_ARGUMENT, "not an AllocateRequest message")
    expect_error("an unknown device id", lambda: client.allocate(["gpu7-share0"]), grpc.StatusCode.NOT_FOUND,
                 "unknown device id 'gpu7-share0'")
    expect_error("a share past N", lambda: client.allocate(["gpu0-share4"]), grpc.StatusCode.NOT_FOUND,
                 "unknown device id")
    expect_error("an empty request", lambda: client.allocate(), grpc.StatusCode.INVALID_ARGUMENT,
                 "no container")
    expect_error("a container without devices", lambda: client.allocate([]), grpc.StatusCode.INVALID_ARGUMENT,
                 "names no device")
    expect_error("one id twice", lambda: client.allocate(["gpu0-share0", "gpu0-share0"]),
                 grpc.StatusCode.INVALID_ARGUMENT, "named twice")
    check(plugin.poll() is None, "the plugin died on bad input")
    check(len(client.allocate(["gpu0-share0"]).container_responses) == 1, "no answer after bad input")

    # 5. GPU 1 lost.
    os.unlink(os.path.join(devdir, "nvidia1"))
    update = next(stream)
    health = {d.ID: d.health for d in update.devices}
    check(all(health["gpu1-share%d" % s] == "Unhealthy" for s in range(SHARES)), "GPU 1 not Unhealthy: %r" % health)
    check(all(health["gpu0-share%d" % s] == "Healthy" for s in range(SHARES)), "GPU 0 not Healthy: %r" % health)
    expect_error("a share of a lost GPU", lambda: client.allocate(["gpu1-share0"]), grpc.StatusCode.INVALID_ARGUMENT,
                 "GPU 1 is unhealthy")
    open(os.path.join(devdir, "nvidia1"), "w").close()
    stream.cancel()
    client.channel.close()

    # 6. The kubelet restarts.
    kubelet.stop()
    os.unlink(kubelet_sock) if os.path.exists(kubelet_sock) else None
    os.unlink(endpoint)
    time.sleep(0.5)
    kubelet = Kubelet()
    kubelet.expect_register(10)
    client = Plugin()
    check(len(next(client.watch()).devices) == 2 * SHARES, "no devices after the restart")
    print("re-registered after the kubelet's restart")
    client.channel.close()
    plugin.terminate()
    check(plugin.wait(10) == 0, "the plugin did not stop cleanly on SIGTERM")

    # 7. Without CDI: mounts and environment.
    start_plugin("--cdi", "off")
    kubelet.expect_register(10)
    client = Plugin()
    response = client.allocate(["gpu0-share0", "gpu0-share1", "gpu0-share2"]).container_responses[0]
    envs = dict(response.envs)
    check(not response.cdi_devices, "CDI names with --cdi off")
    check(envs.get("CUDAW_MEM_LIMIT") == str(3 * MEMORY // SHARES), "envs %r" % envs)
    check(envs.get("LD_PRELOAD") == "/opt/cudaw/lib/cudaw/libcudart.so.13", "envs %r" % envs)
    check(envs.get("CUDAW_SHARE") == "1" and envs.get("CUDAW_SCHED_SOCKET") == "/run/cudaw/cudawd.sock", "envs %r" % envs)
    check(envs.get("CUDAW_RUN_DIR") == "/run/cudaw/containers/pidns-%n-uid-%u", "envs %r" % envs)
    check(envs.get("NVIDIA_VISIBLE_DEVICES") == "0", "envs %r" % envs)
    mounts = {m.host_path: (m.container_path, m.read_only) for m in response.mounts}
    check(mounts == {"/opt/cudaw/lib/cudaw": ("/opt/cudaw/lib/cudaw", True),
                     "/run/cudaw/cudawd.sock": ("/run/cudaw/cudawd.sock", False),
                     "/run/cudaw/containers": ("/run/cudaw/containers", False)}, "mounts %r" % mounts)
    print("without CDI: CUDAW_MEM_LIMIT=%s and %d mounts" % (envs["CUDAW_MEM_LIMIT"], len(mounts)))
    client.channel.close()
    plugin.terminate()
    plugin.wait(10)
    kubelet.stop()
    print("fake kubelet: register, list, allocate 1 and 3, bad input, health, restart, no CDI: ok")
finally:
    if plugin and plugin.poll() is None:
        plugin.kill()
    shutil.rmtree(tmp, ignore_errors=True)
