// The deployment files agree with the code and with each other: promtool
// accepts the Prometheus config and rules, the dashboard queries only metrics
// the server exports, the Dockerfile builds with the README's recipe, and the
// Kubernetes drain budget covers the server's drain timeout.
// Runs from the source root (jagrank_add_test's working directory).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
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

TEST(DeployTest, GrafanaProvisioningPointsAtTheDashboardAndDataSource) {
  const nlohmann::json dashboard = nlohmann::json::parse(ReadFile("deploy/grafana/dashboards/jagrank.json"));
  const YAML::Node sources = YAML::LoadFile("deploy/grafana/provisioning/datasources/prometheus.yml");
  const std::string uid = sources["datasources"][0]["uid"].as<std::string>();
  for (const auto& panel : dashboard.at("panels")) {
    if (panel.at("type") == "row") continue;
    EXPECT_EQ(panel.at("datasource").at("uid"), uid) << panel.at("title");
  }
  const YAML::Node providers = YAML::LoadFile("deploy/grafana/provisioning/dashboards/jagrank.yml");
  const std::string path = providers["providers"][0]["options"]["path"].as<std::string>();
  // docker-compose mounts the dashboards folder where the provider looks.
  const std::string compose = ReadFile("deploy/docker-compose.yml");
  EXPECT_NE(compose.find("./grafana/dashboards:" + path), std::string::npos) << path;
  EXPECT_NE(compose.find("./grafana/provisioning:/etc/grafana/provisioning"), std::string::npos);
  EXPECT_NE(compose.find("./prometheus.yml:/etc/prometheus/prometheus.yml"), std::string::npos);
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
  EXPECT_NE(readme.find("scripts/install-deps.sh --build-only\nmake -o deps build\n"), std::string::npos);
  bool make_line = false;
  for (const std::string& r : runs) make_line |= r.find("make -o deps build") != std::string::npos;
  EXPECT_TRUE(make_line);

  // Issue 5's container contract.
  EXPECT_TRUE(std::regex_search(dockerfile, std::regex(R"(ARG CUDA_VERSION=13\.)")));
  EXPECT_TRUE(std::regex_search(dockerfile, std::regex(R"(ARG UBUNTU=ubuntu24\.04)")));
  EXPECT_NE(dockerfile.find("FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build"), std::string::npos);
  EXPECT_NE(dockerfile.find("FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU} AS runtime"), std::string::npos);
  EXPECT_TRUE(std::regex_search(dockerfile, std::regex(R"(\nUSER [1-9][0-9]*)"))) << "runtime must not be root";
  EXPECT_NE(dockerfile.find("EXPOSE 8500 9100"), std::string::npos);
  EXPECT_TRUE(std::regex_search(dockerfile, std::regex(R"(HEALTHCHECK[^\n]*\\?\n?[^\n]*jagrank-client", "--health)")));
}

TEST(DeployTest, KubernetesDrainBudgetCoversTheServerDrain) {
  const YAML::Node deployment = YAML::LoadFile("deploy/k8s/deployment.yaml");
  const YAML::Node server = YAML::LoadFile("config/server.yaml");
  const YAML::Node pod = deployment["spec"]["template"];
  const YAML::Node container = pod["spec"]["containers"][0];
  const int grace_s = pod["spec"]["terminationGracePeriodSeconds"].as<int>();
  const YAML::Node pre_stop = container["lifecycle"]["preStop"]["exec"]["command"];
  ASSERT_EQ(pre_stop[0].as<std::string>(), "sleep");
  const int pre_stop_s = pre_stop[1].as<int>();
  const double drain_s = server["drain_timeout_ms"].as<double>() / 1000.0;
  EXPECT_GT(grace_s, pre_stop_s + drain_s) << "terminationGracePeriodSeconds must exceed preStop + drain";

  EXPECT_EQ(container["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 1);
  for (const char* probe : {"readinessProbe", "livenessProbe", "startupProbe"}) {
    EXPECT_EQ(container[probe]["grpc"]["port"].as<int>(), 8500) << probe;
  }
  EXPECT_EQ(container["readinessProbe"]["grpc"]["service"].as<std::string>(), "jagrank.v1.Ranker");
  EXPECT_EQ(pod["metadata"]["annotations"]["prometheus.io/scrape"].as<std::string>(), "true");
  EXPECT_EQ(pod["metadata"]["annotations"]["prometheus.io/port"].as<std::string>(), "9100");
  EXPECT_TRUE(pod["spec"]["securityContext"]["runAsNonRoot"].as<bool>());

  const YAML::Node hpa = YAML::LoadFile("deploy/k8s/hpa.yaml");
  EXPECT_EQ(hpa["spec"]["scaleTargetRef"]["name"].as<std::string>(), deployment["metadata"]["name"].as<std::string>());
  // Compose's stop grace also outlasts the drain.
  const YAML::Node compose = YAML::LoadFile("deploy/docker-compose.yml");
  const std::string stop = compose["services"]["jagrank"]["stop_grace_period"].as<std::string>();
  EXPECT_GT(std::stoi(stop), drain_s) << stop;
}

}  // namespace
}  // namespace jagrank
