// cudaw-k8s-plugin: the gRPC edge of the kubelet device plugin. It only translates messages to
// and from the C calls of plugin.h, serves <socket dir>/cudaw-gpu-share.sock, registers with the
// kubelet, and registers again whenever kubelet.sock is re-created (a kubelet restart).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "deviceplugin.grpc.pb.h"
#include "plugin.h"

namespace {

std::atomic<bool> stopping{false};

// The node (its health changes) and a generation that ListAndWatch streams wait on.
struct Shared {
  std::mutex lock;
  std::condition_variable changed;
  k8s_node node{};
  unsigned long generation = 0;
  k8s_plugin_config config{};
};

grpc::Status refuse(grpc::StatusCode code, const char *what, const char *why)
{
  std::fprintf(stderr, "cudaw-k8s-plugin: %s refused: %s\n", what, why);
  return grpc::Status(code, why);
}

// Allocate takes raw bytes, so that a request that is no AllocateRequest gets a reason of ours
// rather than gRPC's bare INTERNAL.
class Plugin final : public v1beta1::DevicePlugin::WithRawCallbackMethod_Allocate<v1beta1::DevicePlugin::Service> {
 public:
  explicit Plugin(Shared &shared) : shared_(shared) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext *, const v1beta1::Empty *,
                                      v1beta1::DevicePluginOptions *out) override
  {
    out->set_pre_start_required(false);
    out->set_get_preferred_allocation_available(true);
    return grpc::Status::OK;
  }

  grpc::Status ListAndWatch(grpc::ServerContext *context, const v1beta1::Empty *,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse> *writer) override
  {
    unsigned long sent = ~0ul;
    std::unique_lock<std::mutex> held(shared_.lock);
    while (!stopping && !context->IsCancelled()) {
      if (sent != shared_.generation) {
        v1beta1::ListAndWatchResponse response;
        k8s_devices_each(&shared_.config, &shared_.node, add_device, &response);
        sent = shared_.generation;
        held.unlock();
        bool ok = writer->Write(response);
        held.lock();
        if (!ok) break;
      }
      shared_.changed.wait_for(held, std::chrono::seconds(1));
    }
    return grpc::Status::OK;
  }

  grpc::Status GetPreferredAllocation(grpc::ServerContext *, const v1beta1::PreferredAllocationRequest *in,
                                      v1beta1::PreferredAllocationResponse *out) override
  {
    std::lock_guard<std::mutex> held(shared_.lock);
    for (const auto &request : in->container_requests()) {
      std::vector<const char *> available, must;
      for (const auto &id : request.available_deviceids()) available.push_back(id.c_str());
      for (const auto &id : request.must_include_deviceids()) must.push_back(id.c_str());
      std::vector<int> chosen(available.size() + 1);
      char err[200] = "";
      int n = k8s_preferred(&shared_.config, &shared_.node, available.data(), (int)available.size(),
                            must.data(), (int)must.size(), request.allocation_size(), chosen.data(),
                            err, sizeof err);
      if (n < 0) return refuse(grpc::StatusCode::INVALID_ARGUMENT, "GetPreferredAllocation", err);
      auto *answer = out->add_container_responses();
      for (int i = 0; i < n; i++) answer->add_deviceids(available[chosen[i]]);
    }
    return grpc::Status::OK;
  }

  grpc::ServerUnaryReactor *Allocate(grpc::CallbackServerContext *context, const grpc::ByteBuffer *raw,
                                     grpc::ByteBuffer *raw_out) override
  {
    grpc::ServerUnaryReactor *reactor = context->DefaultReactor();
    std::vector<grpc::Slice> slices;
    std::string bytes;
    v1beta1::AllocateRequest in;
    v1beta1::AllocateResponse out;
    grpc::Status status;
    if (!raw->Dump(&slices).ok()) slices.clear();
    for (const auto &slice : slices) bytes.append(reinterpret_cast<const char *>(slice.begin()), slice.size());
    if (!in.ParseFromString(bytes))
      status = refuse(grpc::StatusCode::INVALID_ARGUMENT, "Allocate",
                      "the request is not an AllocateRequest message (malformed)");
    else status = allocate(&in, &out);
    if (status.ok()) {
      std::string answer = out.SerializeAsString();
      grpc::Slice slice(answer);
      *raw_out = grpc::ByteBuffer(&slice, 1);
    }
    reactor->Finish(status);
    return reactor;
  }

  grpc::Status PreStartContainer(grpc::ServerContext *, const v1beta1::PreStartContainerRequest *,
                                 v1beta1::PreStartContainerResponse *) override
  {
    return grpc::Status::OK;
  }

 private:
  grpc::Status allocate(const v1beta1::AllocateRequest *in, v1beta1::AllocateResponse *out)
  {
    if (in->container_requests_size() == 0)
      return refuse(grpc::StatusCode::INVALID_ARGUMENT, "Allocate", "no container in the request");
    std::lock_guard<std::mutex> held(shared_.lock);
    for (const auto &request : in->container_requests()) {
      std::vector<const char *> ids;
      for (const auto &id : request.devices_ids()) ids.push_back(id.c_str());
      k8s_answer answer;
      char err[200] = "";
      int rc = k8s_allocate(&shared_.config, &shared_.node, ids.data(), (int)ids.size(), &answer,
                            err, sizeof err);
      if (rc != 0)
        return refuse(rc == -ENOENT ? grpc::StatusCode::NOT_FOUND : grpc::StatusCode::INVALID_ARGUMENT,
                      "Allocate", err);
      auto *response = out->add_container_responses();
      if (answer.cdi_count) {
        for (int i = 0; i < answer.cdi_count; i++) response->add_cdi_devices()->set_name(answer.cdi[i]);
      } else {
        for (int i = 0; i < answer.edits.env_count; i++) {
          std::string pair = answer.edits.env[i];
          size_t eq = pair.find('=');
          (*response->mutable_envs())[pair.substr(0, eq)] = pair.substr(eq + 1);
        }
        for (int i = 0; i < answer.edits.mount_count; i++) {
          auto *mount = response->add_mounts();
          mount->set_host_path(answer.edits.mount[i].host_path);
          mount->set_container_path(answer.edits.mount[i].container_path);
          mount->set_read_only(answer.edits.mount[i].read_only);
        }
      }
      std::fprintf(stderr, "cudaw-k8s-plugin: allocated %d share(s): CUDAW_MEM_LIMIT=%llu%s%s\n",
                   (int)ids.size(), (unsigned long long)answer.memory_limit,
                   answer.cdi_count ? " as " : "", answer.cdi_count ? answer.cdi[answer.cdi_count - 1] : "");
    }
    return grpc::Status::OK;
  }

  static void add_device(const char *id, bool healthy, void *arg)
  {
    auto *device = static_cast<v1beta1::ListAndWatchResponse *>(arg)->add_devices();
    device->set_id(id);
    device->set_health(healthy ? "Healthy" : "Unhealthy");
  }

  Shared &shared_;
};

bool register_with_kubelet(const k8s_plugin_config &config, const std::string &kubelet)
{
  auto channel = grpc::CreateChannel("unix://" + kubelet, grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest request;
  request.set_version(K8S_API_VERSION);
  request.set_endpoint(K8S_PLUGIN_ENDPOINT);
  request.set_resource_name(config.resource);
  request.mutable_options()->set_get_preferred_allocation_available(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1beta1::Empty reply;
  grpc::Status status = stub->Register(&context, request, &reply);
  if (!status.ok()) {
    std::fprintf(stderr, "cudaw-k8s-plugin: registering with %s failed: %s\n", kubelet.c_str(),
                 status.error_message().c_str());
    return false;
  }
  std::fprintf(stderr, "cudaw-k8s-plugin: registered %s with the kubelet (%s)\n", config.resource,
               kubelet.c_str());
  return true;
}

void on_signal(int) { stopping = true; }

}  // namespace

int main(int argc, char **argv)
{
  Shared shared;
  int rc = k8s_plugin_options(argc, argv, &shared.config);
  if (rc) return rc;
  char err[300] = "";
  if (shared.config.given_gpus) {
    shared.node.gpus = shared.config.given_gpus;
    for (int g = 0; g < shared.node.gpus; g++)
      shared.node.memory[g] = shared.config.given_memory, shared.node.healthy[g] = true;
    std::snprintf(shared.node.source, sizeof shared.node.source, "given by --gpus");
  } else if (k8s_node_probe(&shared.node, err, sizeof err) != 0) {
    std::fprintf(stderr, "cudaw-k8s-plugin: %s\n", err);
    return 1;
  }
  k8s_health_update(&shared.config, &shared.node);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::signal(SIGPIPE, SIG_IGN);
  const std::string dir = shared.config.socket_dir;
  const std::string kubelet = dir + "/" K8S_KUBELET_SOCKET, endpoint = dir + "/" K8S_PLUGIN_ENDPOINT;
  std::fprintf(stderr, "cudaw-k8s-plugin: %d GPU(s) (%s), %d shares each, as %s\n",
               shared.node.gpus, shared.node.source, shared.config.shares_per_gpu,
               shared.config.resource);
  ino_t kubelet_seen = 0;
  bool warned_missing = false;
  while (!stopping) {
    // Wait for the kubelet: registering is pointless before its socket exists.
    if (access(kubelet.c_str(), F_OK) != 0) {
      if (!warned_missing)
        std::fprintf(stderr, "cudaw-k8s-plugin: no kubelet socket %s yet; waiting for it\n",
                     kubelet.c_str());
      warned_missing = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    warned_missing = false;
    k8s_kubelet_restarted(kubelet.c_str(), &kubelet_seen);
    unlink(endpoint.c_str());
    Plugin service(shared);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + endpoint, grpc::InsecureServerCredentials());
    builder.RegisterService(&service);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server) {
      std::fprintf(stderr, "cudaw-k8s-plugin: cannot serve on %s; retrying\n", endpoint.c_str());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    bool registered = register_with_kubelet(shared.config, kubelet);
    // Serve until the kubelet comes back anew (its socket re-created, ours removed) or a failed
    // registration is due for a retry.
    for (int tick = 0; !stopping; tick++) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (tick % 5 == 4) {
        std::lock_guard<std::mutex> held(shared.lock);
        if (k8s_health_update(&shared.config, &shared.node)) {
          shared.generation++;
          shared.changed.notify_all();
        }
      }
      if (k8s_kubelet_restarted(kubelet.c_str(), &kubelet_seen) || access(endpoint.c_str(), F_OK) != 0) {
        std::fprintf(stderr, "cudaw-k8s-plugin: the kubelet restarted; registering again\n");
        break;
      }
      if (!registered && tick >= 10) break;
    }
    shared.changed.notify_all();
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  unlink(endpoint.c_str());
  return 0;
}
