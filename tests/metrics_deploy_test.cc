// The deployment files agree with the code and with each other: promtool
// accepts the Prometheus config and rules, the dashboard queries only metrics
// the server exports and takes its data source as an import input, compose
// publishes on loopback only, the Dockerfile builds with the README's
// recipe, and the Kubernetes manifests, rendered by Debian's `kubectl
// kustomize`, line up with the server's flags and config: ports, probes,
// volumes and mounts, the drain budget, GPU scheduling, the scrape, the HPA's
// metrics, and the args themselves (jagrank-server --check-config).
// The image itself is built and run by tests/deploy_image_test.sh.
// Runs from the source root (jagrank_add_test's working directory).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "server/prometheus_metrics.h"
#include "tests/metrics_http.h"

namespace jagrank {
namespace {

using metrics_test::ReadFile;

// Runs a shell command; returns its exit code and fills `output` (stdout+stderr).
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output->append(buf, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> DashboardExpressions(const nlohmann::json& dashboard) {
  std::vector<std::string> exprs;
  for (const auto& panel : dashboard.at("panels")) {
    if (!panel.contains("targets")) continue;
    for (const auto& target : panel.at("targets")) exprs.push_back(target.at("expr").get<std::string>());
  }
  return exprs;
}

TEST(DeployTest, PromtoolAcceptsPrometheusConfigAndRules) {
  std::string out;
  EXPECT_EQ(RunCommand("promtool check config deploy/prometheus.yml", &out), 0) << out;
  EXPECT_NE(out.find("SUCCESS"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunCommand("promtool check rules deploy/jagrank-rules.yml", &out), 0) << out;
}

TEST(DeployTest, PrometheusConfigScrapesTheMetricsPort) {
  const YAML::Node config = YAML::LoadFile("deploy/prometheus.yml");
  bool found = false;
  for (const auto& job : config["scrape_configs"]) {
    if (job["job_name"].as<std::string>() != "jagrank") continue;
    found = true;
    EXPECT_EQ(job["metrics_path"].as<std::string>("/metrics"), "/metrics");
    const std::string target = job["static_configs"][0]["targets"][0].as<std::string>();
    EXPECT_EQ(target.substr(target.find(':')), ":9100") << target;
  }
  EXPECT_TRUE(found) << "no job 'jagrank' in deploy/prometheus.yml";
}

TEST(DeployTest, DashboardQueriesOnlyMetricsTheServerExports) {
  const nlohmann::json dashboard = nlohmann::json::parse(ReadFile("deploy/grafana/dashboards/jagrank.json"));
  const std::vector<std::string> exprs = DashboardExpressions(dashboard);
  ASSERT_GE(exprs.size(), 10u);
  std::set<std::string> used;
  for (const std::string& e : exprs) {
    for (const std::string& name : metrics_test::MetricNamesIn(e)) used.insert(name);
  }
  // docs/metrics.md's QPS definition is on the dashboard as written.
  bool has_qps = false;
  for (const std::string& e : exprs) has_qps |= e.find("rate(jagrank_requests_total") != std::string::npos;
  EXPECT_TRUE(has_qps);

  std::unique_ptr<PrometheusMetrics> metrics;
  ASSERT_TRUE(PrometheusMetrics::Create("127.0.0.1:0", &metrics).ok());
  const metrics_test::HttpResponse r = metrics_test::HttpGet(metrics->port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  const std::set<std::string> exported = metrics_test::FamilyNames(metrics_test::ParseExposition(r.body));
  for (const std::string& name : used) EXPECT_TRUE(exported.count(name)) << "dashboard queries " << name;
  // And the operator's view covers the memory and batcher families.
  for (const char* name : {"jagrank_request_latency_seconds", "jagrank_queue_latency_seconds",
                           "jagrank_compute_latency_seconds", "jagrank_batch_requests",
                           "jagrank_padding_saved_bytes_total", "jagrank_device_memory_used_bytes",
                           "jagrank_process_resident_memory_bytes", "jagrank_candidates_total"}) {
    EXPECT_TRUE(used.count(name)) << "dashboard has no panel on " << name;
  }
}

// Every datasource reference in the dashboard (panels, targets, variables).
void CollectDatasources(const nlohmann::json& node, std::vector<nlohmann::json>* out) {
  if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (it.key() == "datasource") out->push_back(it.value());
      CollectDatasources(it.value(), out);
    }
  } else if (node.is_array()) {
    for (const auto& v : node) CollectDatasources(v, out);
  }
}

TEST(DeployTest, DashboardTakesItsDataSourceAsAnImportInput) {
  const nlohmann::json dashboard = nlohmann::json::parse(ReadFile("deploy/grafana/dashboards/jagrank.json"));
  // Import into any Grafana: the import dialog asks for DS_PROMETHEUS.
  ASSERT_TRUE(dashboard.contains("__inputs"));
  bool input = false;
  for (const auto& in : dashboard.at("__inputs")) {
    input |= in.at("name") == "DS_PROMETHEUS" && in.at("type") == "datasource" && in.at("pluginId") == "prometheus";
  }
  EXPECT_TRUE(input) << "no __inputs entry DS_PROMETHEUS (type datasource, pluginId prometheus)";
  std::vector<nlohmann::json> refs;
  CollectDatasources(dashboard, &refs);
  ASSERT_GE(refs.size(), 10u);
  for (const auto& ref : refs) {
    EXPECT_EQ(ref, (nlohmann::json{{"type", "prometheus"}, {"uid", "${DS_PROMETHEUS}"}})) << ref.dump();
  }
  // Provisioned (compose), nothing substitutes the input: a data source
  // variable of the same name resolves ${DS_PROMETHEUS} to the default
  // Prometheus data source instead.
  bool variable = false;
  for (const auto& v : dashboard.at("templating").at("list")) {
    variable |= v.at("name") == "DS_PROMETHEUS" && v.at("type") == "datasource" && v.at("query") == "prometheus";
  }
  EXPECT_TRUE(variable) << "no templating variable DS_PROMETHEUS of type datasource (query prometheus)";
  const YAML::Node sources = YAML::LoadFile("deploy/grafana/provisioning/datasources/prometheus.yml");
  int default_prometheus = 0;
  for (const auto& source : sources["datasources"]) {
    default_prometheus += source["type"].as<std::string>() == "prometheus" && source["isDefault"].as<bool>(false);
  }
  EXPECT_EQ(default_prometheus, 1) << "compose's Grafana needs exactly one default Prometheus data source";
}

TEST(DeployTest, GrafanaProvisioningPointsAtTheDashboard) {
  const YAML::Node providers = YAML::LoadFile("deploy/grafana/provisioning/dashboards/jagrank.yml");
  const std::string path = providers["providers"][0]["options"]["path"].as<std::string>();
  // docker-compose mounts the dashboards folder where the provider looks.
  const std::string compose = ReadFile("deploy/docker-compose.yml");
  EXPECT_NE(compose.find("./grafana/dashboards:" + path), std::string::npos) << path;
  EXPECT_NE(compose.find("./grafana/provisioning:/etc/grafana/provisioning"), std::string::npos);
  EXPECT_NE(compose.find("./prometheus.yml:/etc/prometheus/prometheus.yml"), std::string::npos);
}

TEST(DeployTest, ComposePublishesOnLoopbackOnlyAndTakesSecretsFromTheEnvironment) {
  const YAML::Node compose = YAML::LoadFile("deploy/docker-compose.yml");
  int published = 0;
  for (const auto& service : compose["services"]) {
    for (const auto& port : service.second["ports"]) {
      ++published;
      EXPECT_EQ(port.as<std::string>().rfind("127.0.0.1:", 0), 0u)
          << service.first.as<std::string>() << " publishes " << port.as<std::string>() << " beyond loopback";
    }
  }
  EXPECT_GE(published, 4);
  const std::string password =
      compose["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"].as<std::string>("");
  EXPECT_TRUE(std::regex_match(password, std::regex(R"(\$\{[A-Z_]+:\?[^}]*\})")))
      << "GF_SECURITY_ADMIN_PASSWORD must come from the environment, required (${VAR:?message}): " << password;
  for (const auto& arg : compose["services"]["prometheus"]["command"]) {
    EXPECT_EQ(arg.as<std::string>().find("enable-lifecycle"), std::string::npos) << "Prometheus lifecycle API is on";
  }
  // The model repository is mounted read-only where the server reads it.
  const YAML::Node jagrank = compose["services"]["jagrank"];
  std::string repository;
  for (size_t i = 0; i + 1 < jagrank["command"].size(); ++i) {
    if (jagrank["command"][i].as<std::string>() == "--model-repository") {
      repository = jagrank["command"][i + 1].as<std::string>();
    }
  }
  ASSERT_FALSE(repository.empty()) << "compose's jagrank serves no --model-repository";
  bool mounted = false;
  for (const auto& volume : jagrank["volumes"]) {
    mounted |= volume.as<std::string>().find(":" + repository + ":ro") != std::string::npos;
  }
  EXPECT_TRUE(mounted) << repository << " is not mounted read-only";
}

TEST(DeployTest, NoReferenceToDocumentsOutsideTheRepository) {
  std::vector<std::string> files = {"Dockerfile", ".dockerignore"};
  for (const auto& entry : std::filesystem::recursive_directory_iterator("deploy")) {
    if (entry.is_regular_file()) files.push_back(entry.path().string());
  }
  for (const std::string& file : files) {
    const std::string text = ReadFile(file);
    EXPECT_EQ(text.find("DESIGN.md"), std::string::npos) << file;
    EXPECT_EQ(text.find(std::string("..") + "/shared"), std::string::npos) << file;
  }
}

// Dockerfile RUN instructions, continuation lines joined.
std::vector<std::string> DockerRunCommands(const std::string& dockerfile) {
  std::vector<std::string> runs;
  std::istringstream in(dockerfile);
  std::string line, current;
  bool in_run = false;
  while (std::getline(in, line)) {
    if (!in_run) {
      if (line.rfind("RUN ", 0) != 0) continue;
      in_run = true;
      current = line.substr(4);
    } else {
      current += " " + line;
    }
    if (!current.empty() && current.back() == '\\') {
      current.pop_back();
      continue;
    }
    runs.push_back(current);
    in_run = false;
  }
  return runs;
}

// The targets of every `make ...` in `commands` (options and VAR=value skipped).
std::set<std::string> MakeTargets(const std::vector<std::string>& commands) {
  std::set<std::string> targets;
  const std::regex make_call(R"((^|[;&|]\s*)make((\s+("[^"]*"|[^\s;&|]+))*))");
  for (const std::string& c : commands) {
    for (auto it = std::sregex_iterator(c.begin(), c.end(), make_call); it != std::sregex_iterator(); ++it) {
      std::istringstream words((*it)[2].str());
      std::string w;
      bool option_arg = false;
      while (words >> w) {
        if (option_arg) {
          option_arg = false;
          continue;
        }
        if (w == "-o" || w == "-C" || w == "-f" || w == "-j") {
          option_arg = true;
          continue;
        }
        if (w[0] == '-' || w.find('=') != std::string::npos || w[0] == '"') continue;
        targets.insert(w);
      }
    }
  }
  return targets;
}

TEST(DeployTest, DockerfileBuildsWithTheReadmeRecipe) {
  const std::string dockerfile = ReadFile("Dockerfile");
  const std::string makefile = ReadFile("Makefile");
  const std::string readme = ReadFile("deploy/README.md");
  ASSERT_FALSE(dockerfile.empty());
  const std::vector<std::string> runs = DockerRunCommands(dockerfile);

  // The same install script as `make deps` (and so `make run` / `make test`).
  bool runs_script = false;
  for (const std::string& r : runs) runs_script |= r.find("scripts/install-deps.sh --build-only") != std::string::npos;
  EXPECT_TRUE(runs_script) << "the Dockerfile must install through scripts/install-deps.sh";
  EXPECT_TRUE(std::regex_search(makefile, std::regex(R"(\ndeps:[^\n]*\n\t@?scripts/install-deps\.sh)")))
      << "Makefile's deps target no longer runs scripts/install-deps.sh";

  // The same Makefile targets, which must exist.
  const std::set<std::string> targets = MakeTargets(runs);
  EXPECT_EQ(targets, std::set<std::string>{"build"});
  for (const std::string& t : targets) {
    EXPECT_TRUE(std::regex_search(makefile, std::regex("(^|\n)" + t + ":"))) << "no make target " << t;
  }
  // deploy/README.md documents exactly these steps.
  EXPECT_NE(readme.find("scripts/install-deps.sh --build-only\nmake -o deps build"), std::string::npos);
  bool make_line = false;
  for (const std::string& r : runs) make_line |= r.find("make -o deps build") != std::string::npos;
  EXPECT_TRUE(make_line);
  // The runtime packages come from the binaries' resolved libraries.
  bool derives = false;
  for (const std::string& r : runs) {
    derives |= r.find("deploy/image/runtime-packages.sh /out/bin/") != std::string::npos;
  }
  EXPECT_TRUE(derives);

  // Base images are build arguments; the defaults are the CUDA images: the
  // devel image compiles, the smallest one (base: cudart only, cuBLAS added
  // by the runtime packages) runs.
  EXPECT_TRUE(std::regex_search(
      dockerfile, std::regex(R"(\nARG BUILD_BASE=docker\.io/nvidia/cuda:13\.[0-9.]+-devel-ubuntu24\.04\n)")));
  EXPECT_TRUE(std::regex_search(
      dockerfile, std::regex(R"(\nARG RUNTIME_BASE=docker\.io/nvidia/cuda:13\.[0-9.]+-base-ubuntu24\.04\n)")));
  EXPECT_NE(dockerfile.find("\nFROM ${BUILD_BASE} AS build\n"), std::string::npos);
  EXPECT_NE(dockerfile.find("\nFROM ${RUNTIME_BASE} AS runtime\n"), std::string::npos);
  // A fat binary for sm_80, sm_86, sm_89 and sm_90; 90 in the list is what
  // makes kernels/attention add the sm_90a wgmma kernels (and only those).
  std::smatch archs;
  ASSERT_TRUE(std::regex_search(dockerfile, archs, std::regex(R"(\nARG CUDA_ARCHITECTURES="([^"]*)\")")));
  EXPECT_EQ(archs[1].str(), "80-real;86-real;89-real;90");
  EXPECT_NE(dockerfile.find("-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}"), std::string::npos);
  EXPECT_NE(ReadFile("kernels/attention/CMakeLists.txt").find("code=sm_90a"), std::string::npos);

  EXPECT_TRUE(std::regex_search(dockerfile, std::regex(R"(\nUSER [1-9][0-9]*)"))) << "runtime must not be root";
  EXPECT_NE(dockerfile.find("EXPOSE 8500 9100"), std::string::npos);
  EXPECT_TRUE(std::regex_search(dockerfile, std::regex(R"(HEALTHCHECK[^\n]*\\\n\s*CMD \["jagrank-healthcheck"\])")));
  EXPECT_NE(dockerfile.find("deploy/image/healthcheck.sh /usr/local/bin/jagrank-healthcheck"), std::string::npos);
  // make image / make image-test, and make test runs the image test.
  EXPECT_TRUE(std::regex_search(makefile, std::regex(R"(\nimage:[^\n]*\n\t[^\n]*build --format docker)")));
  EXPECT_TRUE(std::regex_search(makefile, std::regex(R"(\nimage-test:[^\n]*\n\t[^\n]*deploy_image_test)")));
  EXPECT_NE(ReadFile("tests/metrics.cmake").find("add_test(NAME deploy_image_test"), std::string::npos);
}

// ---- Kubernetes: the manifests as `kubectl kustomize` renders them --------

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// Debian's kubectl (package kubernetes-client): installed, or unpacked by
// scripts/install-deps.sh where another package owns /usr/bin/kubectl.
std::string DebianKubectl() {
  const std::string unpacked = "/opt/jagrank/kubernetes-client/usr/bin/kubectl";
  if (::access(unpacked.c_str(), X_OK) == 0) return unpacked;
  std::string owner;
  if (RunCommand("dpkg -S /usr/bin/kubectl", &owner) == 0 && owner.rfind("kubernetes-client:", 0) == 0) {
    return "/usr/bin/kubectl";
  }
  return "";
}

// "--name=value" and "--name value" flags, in order (a later one wins).
std::vector<std::pair<std::string, std::string>> ParseFlags(const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> flags;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].rfind("--", 0) != 0) continue;
    const size_t eq = args[i].find('=');
    if (eq != std::string::npos) {
      flags.emplace_back(args[i].substr(2, eq - 2), args[i].substr(eq + 1));
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      flags.emplace_back(args[i].substr(2), args[i + 1]);
      ++i;
    } else {
      flags.emplace_back(args[i].substr(2), "true");
    }
  }
  return flags;
}

std::string LastFlag(const std::vector<std::pair<std::string, std::string>>& flags, const std::string& name) {
  std::string value;
  for (const auto& [n, v] : flags) {
    if (n == name) value = v;
  }
  return value;
}

int PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  try {
    return std::stoi(address.substr(colon + 1));
  } catch (...) {
    return -1;
  }
}

// The image's ENTRYPOINT (exec form), e.g. jagrank-server --config /etc/jagrank/server.yaml.
std::vector<std::string> DockerEntrypoint() {
  std::smatch m;
  const std::string dockerfile = ReadFile("Dockerfile");
  if (!std::regex_search(dockerfile, m, std::regex(R"(\nENTRYPOINT (\[[^\n]*\]))"))) return {};
  return nlohmann::json::parse(m[1].str()).get<std::vector<std::string>>();
}

class KubernetesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    kubectl_ = new std::string(DebianKubectl());
    docs_ = new std::vector<YAML::Node>();
    render_output_ = new std::string();
    if (kubectl_->empty()) return;
    if (RunCommand("'" + *kubectl_ + "' kustomize deploy/k8s 2>&1", render_output_) != 0) return;
    try {
      *docs_ = YAML::LoadAll(*render_output_);
    } catch (const YAML::Exception& e) {
      *render_output_ += std::string("\nYAML error: ") + e.what();
      docs_->clear();
    }
  }
  static void TearDownTestSuite() {
    delete kubectl_;
    delete docs_;
    delete render_output_;
  }

  void SetUp() override {
    ASSERT_FALSE(kubectl_->empty())
        << "Debian's kubectl (package kubernetes-client) is not here: run scripts/install-deps.sh";
    ASSERT_FALSE(docs_->empty()) << "kubectl kustomize deploy/k8s failed:\n" << *render_output_;
    deployment_ = Find("Deployment", "jagrank");
    ASSERT_TRUE(deployment_) << "no Deployment jagrank in the rendered manifests";
    pod_ = deployment_["spec"]["template"];
    container_ = pod_["spec"]["containers"][0];
    ASSERT_EQ(container_["name"].as<std::string>(), "jagrank");
    for (const auto& a : container_["args"]) args_.push_back(a.as<std::string>());
    std::vector<std::string> command = DockerEntrypoint();
    ASSERT_FALSE(command.empty()) << "no exec-form ENTRYPOINT in the Dockerfile";
    command.insert(command.end(), args_.begin(), args_.end());
    command_ = command;
    flags_ = ParseFlags(std::vector<std::string>(command.begin() + 1, command.end()));
    for (const auto& v : pod_["spec"]["volumes"]) {
      volumes_[v["name"].as<std::string>()] = static_cast<const YAML::Node&>(v);
    }
    ASSERT_NO_FATAL_FAILURE(LoadServerConfig());
  }

  // The first rendered document of `kind` (and `name_prefix`, when given: a
  // generated ConfigMap's name carries a hash suffix).
  YAML::Node Find(const std::string& kind, const std::string& name_prefix = "") const {
    for (const auto& doc : *docs_) {
      if (doc["kind"].as<std::string>("") != kind) continue;
      if (doc["metadata"]["name"].as<std::string>("").rfind(name_prefix, 0) != 0) continue;
      return doc;
    }
    return YAML::Node();
  }
  std::vector<YAML::Node> All(const std::string& kind) const {
    std::vector<YAML::Node> out;
    for (const auto& doc : *docs_) {
      if (doc["kind"].as<std::string>("") == kind) out.push_back(doc);
    }
    return out;
  }

  // The volume mount whose mountPath contains `path`, and the file's path
  // relative to it; a null node when no mount does.
  YAML::Node MountOf(const std::string& path, std::string* relative) const {
    YAML::Node best;
    size_t best_len = 0;
    for (const auto& m : container_["volumeMounts"]) {
      const std::string mount = m["mountPath"].as<std::string>();
      if ((path == mount || path.rfind(mount + "/", 0) == 0) && mount.size() > best_len) {
        best.reset(m);
        best_len = mount.size();
        *relative = path == mount ? "" : path.substr(mount.size() + 1);
      }
    }
    return best;
  }

  // The server's effective config keys: the image's config/server.yaml,
  // replaced by the --config file (a ConfigMap key when it is mounted from
  // one), then single keys from flags.
  void LoadServerConfig() {
    const std::string config_path = LastFlag(flags_, "config");
    ASSERT_FALSE(config_path.empty());
    std::string relative;
    const YAML::Node mount = MountOf(config_path, &relative);
    std::string text;
    if (mount) {
      const YAML::Node volume = volumes_[mount["name"].as<std::string>()];
      ASSERT_TRUE(volume["configMap"]) << config_path << " is mounted from volume " << mount["name"]
                                       << ", not a ConfigMap";
      const YAML::Node config_map = Find("ConfigMap", volume["configMap"]["name"].as<std::string>());
      ASSERT_TRUE(config_map) << "no ConfigMap " << volume["configMap"]["name"];
      ASSERT_TRUE(config_map["data"][relative]) << "ConfigMap has no key " << relative << " for " << config_path;
      text = config_map["data"][relative].as<std::string>();
      config_map_text_ = text;
      config_key_ = relative;
    } else {
      ASSERT_EQ(config_path.rfind("/etc/jagrank/", 0), 0u) << config_path << " is neither mounted nor in the image";
      text = ReadFile("config/" + config_path.substr(13));
    }
    server_config_ = YAML::Load(text);
    for (const auto& [name, value] : flags_) {
      std::string key = name;
      for (char& c : key) c = c == '-' ? '_' : c;
      if (name != "config") server_config_[key] = value;
    }
  }

  std::string ConfigValue(const std::string& key) const {
    const YAML::Node defaults = YAML::LoadFile("config/server.yaml");
    if (server_config_[key]) return server_config_[key].as<std::string>();
    return defaults[key].as<std::string>("");
  }

  int ContainerPort(const std::string& name) const {
    for (const auto& p : container_["ports"]) {
      if (p["name"].as<std::string>() == name) return p["containerPort"].as<int>();
    }
    return -1;
  }

  static bool Selects(const YAML::Node& match_labels, const YAML::Node& labels) {
    if (!match_labels || match_labels.size() == 0) return false;
    for (const auto& kv : match_labels) {
      const std::string key = kv.first.as<std::string>();
      if (!labels[key] || labels[key].as<std::string>() != kv.second.as<std::string>()) return false;
    }
    return true;
  }

  static std::string* kubectl_;
  static std::vector<YAML::Node>* docs_;
  static std::string* render_output_;
  YAML::Node deployment_, pod_, container_;
  std::vector<std::string> args_, command_;
  std::vector<std::pair<std::string, std::string>> flags_;
  std::map<std::string, YAML::Node> volumes_;
  YAML::Node server_config_;
  std::string config_map_text_, config_key_;
};

std::string* KubernetesTest::kubectl_ = nullptr;
std::vector<YAML::Node>* KubernetesTest::docs_ = nullptr;
std::string* KubernetesTest::render_output_ = nullptr;

TEST_F(KubernetesTest, PortsAndProbesMatchTheServerConfig) {
  const int grpc_port = PortOf(ConfigValue("grpc_address"));
  const int metrics_port = PortOf(ConfigValue("metrics_address"));
  ASSERT_GT(grpc_port, 0) << ConfigValue("grpc_address");
  ASSERT_GT(metrics_port, 0) << ConfigValue("metrics_address");
  EXPECT_EQ(ContainerPort("grpc"), grpc_port);
  EXPECT_EQ(ContainerPort("metrics"), metrics_port);
  for (const char* probe : {"startupProbe", "readinessProbe", "livenessProbe"}) {
    ASSERT_TRUE(container_[probe]["grpc"]) << probe << " is not a gRPC probe";
    EXPECT_EQ(container_[probe]["grpc"]["port"].as<int>(), grpc_port) << probe;
  }
  // Ready and started = the ranker is SERVING (model loaded and warmed up).
  EXPECT_EQ(container_["readinessProbe"]["grpc"]["service"].as<std::string>(), "jagrank.v1.Ranker");
  EXPECT_EQ(container_["startupProbe"]["grpc"]["service"].as<std::string>(), "jagrank.v1.Ranker");

  const YAML::Node pod_labels = pod_["metadata"]["labels"];
  EXPECT_TRUE(Selects(deployment_["spec"]["selector"]["matchLabels"], pod_labels));
  const std::vector<YAML::Node> services = All("Service");
  ASSERT_FALSE(services.empty());
  for (const auto& service : services) {
    EXPECT_TRUE(Selects(service["spec"]["selector"], pod_labels)) << service["metadata"]["name"];
    for (const auto& port : service["spec"]["ports"]) {
      const std::string target = port["targetPort"].as<std::string>();
      EXPECT_GT(ContainerPort(target), 0) << service["metadata"]["name"] << " targets no container port " << target;
    }
  }
}

TEST_F(KubernetesTest, EachPodIsScrapedOnceThroughThePodMonitor) {
  const YAML::Node monitor = Find("PodMonitor");
  ASSERT_TRUE(monitor) << "no PodMonitor";
  EXPECT_TRUE(Selects(monitor["spec"]["selector"]["matchLabels"], pod_["metadata"]["labels"]));
  ASSERT_EQ(monitor["spec"]["podMetricsEndpoints"].size(), 1u);
  const YAML::Node endpoint = monitor["spec"]["podMetricsEndpoints"][0];
  EXPECT_EQ(ContainerPort(endpoint["port"].as<std::string>()), PortOf(ConfigValue("metrics_address")));
  EXPECT_EQ(endpoint["path"].as<std::string>("/metrics"), "/metrics");
  // job="jagrank", as deploy/jagrank-rules.yml's alerts expect.
  const std::string job_label = monitor["spec"]["jobLabel"].as<std::string>("");
  EXPECT_EQ(pod_["metadata"]["labels"][job_label].as<std::string>(""), "jagrank");
  // Not also through annotations (pods or Services) or a ServiceMonitor.
  EXPECT_TRUE(All("ServiceMonitor").empty());
  std::vector<YAML::Node> annotated = All("Service");
  annotated.push_back(deployment_["spec"]["template"]);
  for (const auto& object : annotated) {
    for (const auto& kv : object["metadata"]["annotations"]) {
      EXPECT_NE(kv.first.as<std::string>().rfind("prometheus.io/", 0), 0u)
          << object["metadata"]["name"] << " carries " << kv.first << ": scraped twice";
    }
  }
}

TEST_F(KubernetesTest, VolumesAndMountsLineUp) {
  std::set<std::string> mounted;
  for (const auto& m : container_["volumeMounts"]) {
    const std::string name = m["name"].as<std::string>();
    EXPECT_TRUE(volumes_.count(name)) << "mount of undeclared volume " << name;
    mounted.insert(name);
  }
  for (const auto& [name, volume] : volumes_) {
    EXPECT_TRUE(mounted.count(name)) << "volume " << name << " is mounted nowhere";
    if (volume["persistentVolumeClaim"]) {
      const std::string claim = volume["persistentVolumeClaim"]["claimName"].as<std::string>();
      EXPECT_TRUE(Find("PersistentVolumeClaim", claim)) << "no PersistentVolumeClaim " << claim;
    }
    if (volume["configMap"]) {
      const std::string map = volume["configMap"]["name"].as<std::string>();
      EXPECT_TRUE(Find("ConfigMap", map)) << "no ConfigMap " << map;
    }
  }
  // The model repository is the claim's mount, read-only.
  const std::string repository = LastFlag(flags_, "model-repository");
  ASSERT_FALSE(repository.empty())
      << "the Deployment serves no --model-repository: production would serve the random model";
  std::string relative;
  const YAML::Node mount = MountOf(repository, &relative);
  ASSERT_TRUE(mount) << repository << " is not on any volume";
  EXPECT_EQ(relative, "") << repository << " should be the volume's mount point";
  EXPECT_TRUE(mount["readOnly"].as<bool>(false)) << "the model volume must be mounted read-only";
  EXPECT_TRUE(volumes_[mount["name"].as<std::string>()]["persistentVolumeClaim"]) << "models do not come from a PVC";
  EXPECT_TRUE(LastFlag(flags_, "model-weights").empty()) << "--model-weights bypasses the repository";
  // The upload pod of deploy/README.md writes where the servers read.
  const YAML::Node upload = YAML::LoadFile("deploy/k8s/model-upload-pod.yaml");
  EXPECT_EQ(upload["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"].as<std::string>(),
            volumes_[mount["name"].as<std::string>()]["persistentVolumeClaim"]["claimName"].as<std::string>());
  EXPECT_EQ(upload["spec"]["containers"][0]["volumeMounts"][0]["mountPath"].as<std::string>(), repository);
  EXPECT_EQ(upload["spec"]["securityContext"]["runAsUser"].as<int>(),
            pod_["spec"]["securityContext"]["runAsUser"].as<int>());
  // The server's config file comes from the ConfigMap (LoadServerConfig).
  EXPECT_FALSE(config_map_text_.empty()) << "--config " << LastFlag(flags_, "config") << " is not the ConfigMap's";
  // A read-only root file system needs a writable /tmp.
  if (container_["securityContext"]["readOnlyRootFilesystem"].as<bool>(false)) {
    const YAML::Node tmp = MountOf("/tmp", &relative);
    ASSERT_TRUE(tmp) << "no /tmp volume under a read-only root file system";
    EXPECT_TRUE(volumes_[tmp["name"].as<std::string>()]["emptyDir"]);
  }
}

TEST_F(KubernetesTest, DrainBudgetMatchesTheGracePeriod) {
  const double grace_s = pod_["spec"]["terminationGracePeriodSeconds"].as<double>();
  const YAML::Node pre_stop = container_["lifecycle"]["preStop"]["exec"]["command"];
  ASSERT_EQ(pre_stop[0].as<std::string>(), "sleep");
  const double pre_stop_s = pre_stop[1].as<double>();
  const double drain_s = std::stod(ConfigValue("drain_timeout_ms")) / 1000.0;
  const double linger_s = std::stod(ConfigValue("drain_linger_ms")) / 1000.0;
  const double needed_s = pre_stop_s + drain_s + linger_s;
  // Covers it (no accepted request cut off), with a few seconds to exit, but
  // not so much that a stuck pod holds its GPU far past the drain.
  EXPECT_GT(grace_s, needed_s) << "terminationGracePeriodSeconds below preStop + drain_timeout_ms + drain_linger_ms";
  EXPECT_LE(grace_s, needed_s + 15) << "terminationGracePeriodSeconds far above the drain: change them together";
  // The drain settings are stated in the ConfigMap beside it, not left to defaults.
  const YAML::Node config_map = YAML::Load(config_map_text_);
  EXPECT_TRUE(config_map["drain_timeout_ms"]) << "server.yaml of the ConfigMap does not set drain_timeout_ms";
  EXPECT_TRUE(config_map["drain_linger_ms"]) << "server.yaml of the ConfigMap does not set drain_linger_ms";
  // Compose's stop grace also outlasts the drain.
  const YAML::Node compose = YAML::LoadFile("deploy/docker-compose.yml");
  const std::string stop = compose["services"]["jagrank"]["stop_grace_period"].as<std::string>();
  EXPECT_GT(std::stoi(stop), drain_s + linger_s) << stop;
}

TEST_F(KubernetesTest, RunsOnGpuNodesOnePodPerGpu) {
  EXPECT_EQ(container_["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);
  EXPECT_EQ(ConfigValue("device").rfind("cuda", 0), 0u) << "device " << ConfigValue("device");
  bool tolerates = false;
  for (const auto& t : pod_["spec"]["tolerations"]) tolerates |= t["key"].as<std::string>("") == "nvidia.com/gpu";
  EXPECT_TRUE(tolerates) << "no toleration for the nvidia.com/gpu taint";
  const YAML::Node selector = pod_["spec"]["nodeSelector"];
  ASSERT_TRUE(selector && selector.size() > 0) << "no nodeSelector for GPU nodes";
  bool gpu_label = false;
  for (const auto& kv : selector) gpu_label |= kv.first.as<std::string>().find("nvidia.com/gpu") == 0;
  EXPECT_TRUE(gpu_label);
  EXPECT_TRUE(pod_["spec"]["securityContext"]["runAsNonRoot"].as<bool>(false));
}

TEST_F(KubernetesTest, HpaScalesOnQueueSignalsThatTheAdapterServes) {
  const YAML::Node hpa = Find("HorizontalPodAutoscaler");
  ASSERT_TRUE(hpa);
  EXPECT_EQ(hpa["spec"]["scaleTargetRef"]["kind"].as<std::string>(), "Deployment");
  EXPECT_EQ(hpa["spec"]["scaleTargetRef"]["name"].as<std::string>(), deployment_["metadata"]["name"].as<std::string>());

  // prometheus-adapter's own config format: rules: [{seriesQuery, resources, name, metricsQuery}].
  const YAML::Node adapter = YAML::LoadFile("deploy/prometheus-adapter.yaml");
  ASSERT_TRUE(adapter["rules"] && adapter["rules"].IsSequence()) << "deploy/prometheus-adapter.yaml has no rules list";
  std::map<std::string, std::string> served;  // custom metric -> server metric family it reads
  for (const auto& rule : adapter["rules"]) {
    const std::string series = rule["seriesQuery"].as<std::string>();
    const std::set<std::string> families = metrics_test::MetricNamesIn(series);
    ASSERT_EQ(families.size(), 1u) << series;
    EXPECT_EQ(rule["resources"]["overrides"]["namespace"]["resource"].as<std::string>(), "namespace");
    EXPECT_EQ(rule["resources"]["overrides"]["pod"]["resource"].as<std::string>(), "pod");
    const std::string query = rule["metricsQuery"].as<std::string>();
    EXPECT_NE(query.find("<<.Series>>{<<.LabelMatchers>>}"), std::string::npos) << query;
    EXPECT_NE(query.find("<<.GroupBy>>"), std::string::npos) << query;
    served[rule["name"]["as"].as<std::string>()] = *families.begin();
  }
  // Every metric it reads is one the server exports.
  std::unique_ptr<PrometheusMetrics> metrics;
  ASSERT_TRUE(PrometheusMetrics::Create("127.0.0.1:0", &metrics).ok());
  const metrics_test::HttpResponse r = metrics_test::HttpGet(metrics->port(), "/metrics");
  ASSERT_EQ(r.status, 200);
  const std::set<std::string> exported = metrics_test::FamilyNames(metrics_test::ParseExposition(r.body));
  for (const auto& [name, family] : served) EXPECT_TRUE(exported.count(family)) << name << " reads " << family;

  // The HPA's metrics are served, per pod, and rise under overload: queue
  // latency or queue depth (QPS stays flat at capacity).
  ASSERT_GT(hpa["spec"]["metrics"].size(), 0u);
  for (const auto& m : hpa["spec"]["metrics"]) {
    ASSERT_EQ(m["type"].as<std::string>(), "Pods");
    const std::string name = m["pods"]["metric"]["name"].as<std::string>();
    ASSERT_TRUE(served.count(name)) << "the HPA scales on " << name << ", which no adapter rule serves";
    EXPECT_TRUE(served[name] == "jagrank_queue_latency_seconds" || served[name] == "jagrank_queue_depth")
        << name << " reads " << served[name] << ", not a queue signal";
    EXPECT_EQ(m["pods"]["target"]["type"].as<std::string>(), "AverageValue");
  }
}

// Writes `text` to `path`.
void WriteFile(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

// `text` with every path under a mount point moved to its host folder, in
// one pass (a host folder may itself lie under a mount point, e.g. /tmp).
std::string Remap(const std::string& text, const std::vector<std::pair<std::string, std::string>>& mounts) {
  if (mounts.empty()) return text;
  std::vector<std::pair<std::string, std::string>> longest_first = mounts;
  std::sort(longest_first.begin(), longest_first.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  std::string alternatives;
  for (const auto& [mount, host] : longest_first) alternatives += (alternatives.empty() ? "" : "|") + mount;
  // A mount point at the start of a path: after '=', a quote, blank or line
  // start, and followed by '/' or the path's end.
  const std::regex path("(^|[=\\s'\"])(" + alternatives + ")(?=/|$|[\\s'\"])");
  std::string out;
  auto last = text.cbegin();
  for (auto it = std::sregex_iterator(text.begin(), text.end(), path); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out.append(last, m[2].first);
    for (const auto& [mount, host] : longest_first) {
      if (m[2].str() == mount) {
        out += host;
        break;
      }
    }
    last = m[2].second;
  }
  out.append(last, text.cend());
  return out;
}

TEST_F(KubernetesTest, ServerAcceptsTheDeploymentArgs) {
  const std::string server = Env("JAGRANK_SERVER");
  const std::string exporter = Env("JAGRANK_EXPORT_MODEL");
  ASSERT_FALSE(server.empty()) << "JAGRANK_SERVER not set (tests/metrics.cmake sets it)";
  ASSERT_FALSE(exporter.empty()) << "JAGRANK_EXPORT_MODEL not set (tests/metrics.cmake sets it)";
  std::string help;
  RunCommand("'" + server + "' --help", &help);
  ASSERT_NE(help.find("--check-config"), std::string::npos)
      << "jagrank-server has no --check-config flag, so the Deployment's args cannot be checked";
  for (const char* flag : {"--model-repository", "--model-poll-interval-s"}) {
    ASSERT_NE(help.find(flag), std::string::npos)
        << "jagrank-server has no " << flag << " flag yet (issue 21: the server's model repository), "
        << "which the Deployment and compose serve from";
  }

  // Each volume mount becomes a host folder with what the volume holds: the
  // ConfigMap's files, a model repository with one exported version, the
  // image's config/ at /etc/jagrank.
  char dir_template[] = "/tmp/jagrank-deploy-test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  struct RemoveAtEnd {
    std::string path;
    ~RemoveAtEnd() { std::filesystem::remove_all(path); }
  } remove_at_end{dir};
  std::vector<std::pair<std::string, std::string>> mounts = {
      {"/etc/jagrank", std::filesystem::absolute("config").string()}};
  for (const auto& m : container_["volumeMounts"]) {
    mounts.emplace_back(m["mountPath"].as<std::string>(), dir + m["mountPath"].as<std::string>());
  }
  for (const auto& m : container_["volumeMounts"]) {
    const std::string host = dir + m["mountPath"].as<std::string>();
    std::filesystem::create_directories(host);
    const YAML::Node volume = volumes_[m["name"].as<std::string>()];
    if (volume["configMap"]) {
      const YAML::Node map = Find("ConfigMap", volume["configMap"]["name"].as<std::string>());
      for (const auto& kv : map["data"]) {
        WriteFile(host + "/" + kv.first.as<std::string>(), Remap(kv.second.as<std::string>(), mounts));
      }
    } else if (volume["persistentVolumeClaim"]) {
      std::filesystem::create_directories(host + "/1");
      std::string out;
      ASSERT_EQ(RunCommand("'" + exporter + "' --output '" + host + "/1/model.safetensors'", &out), 0) << out;
    }
  }
  std::string command = "'" + server + "'";
  for (size_t i = 1; i < command_.size(); ++i) command += " '" + Remap(command_[i], mounts) + "'";
  std::string out;
  int code = RunCommand(command + " --check-config 2>&1", &out);
  if (code != 0 && out.find("no usable CUDA device") != std::string::npos) {
    // No GPU on this machine: the pods' device (cuda, checked in
    // RunsOnGpuNodesOnePodPerGpu) cannot resolve here; everything else is
    // checked as written.
    command += " --device=cpu";
    out.clear();
    code = RunCommand(command + " --check-config 2>&1", &out);
  }
  EXPECT_EQ(code, 0) << command << " --check-config\n" << out;
  EXPECT_NE(out.find("config OK"), std::string::npos) << out;

  // And it does read the mounted config: a key it does not know fails.
  if (!config_key_.empty()) {
    const std::string config_file = dir + Remap(LastFlag(flags_, "config"), {});
    std::ofstream(config_file, std::ios::app) << "\nno_such_key: 1\n";
    out.clear();
    EXPECT_NE(RunCommand(command + " --check-config 2>&1", &out), 0) << "an unknown config key passed:\n" << out;
    EXPECT_NE(out.find("no_such_key"), std::string::npos) << out;
  }
}

}  // namespace
}  // namespace jagrank
