// jagrank-client: one Rank request from flags or a JSON file (the proto3 JSON
// form of jagrank.v1.RankRequest), prints one "item_id score" line per
// candidate. --health checks grpc.health.v1 (exit 0 only when SERVING);
// --info prints GetModelInfo.
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "jagrank/v1/ranker.grpc.pb.h"
#include "common/flags.h"
#include "common/process.h"
#include "tools/channel_credentials.h"

namespace jagrank {
namespace {

// "1,2,3" -> {1, 2, 3}; empty -> {}.
template <typename T>
bool ParseList(const std::string& text, std::vector<T>* out) {
  out->clear();
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    std::stringstream one(item);
    T value;
    if (!(one >> value) || !one.eof()) return false;
    out->push_back(value);
  }
  return true;
}

void SetDeadline(grpc::ClientContext* context, int64_t timeout_ms) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
}

const char* CodeName(grpc::StatusCode code) {
  static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
                                 "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                 "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  return i >= 0 && i < 17 ? kNames[i] : "UNKNOWN";
}

int Fail(const std::string& what, const grpc::Status& status) {
  std::fprintf(stderr, "jagrank-client: %s failed: %s: %s\n", what.c_str(), CodeName(status.error_code()),
               status.error_message().c_str());
  return 1;
}

int Main(int argc, char** argv) {
  std::string address = "localhost:8500", request_json, request_id = "jagrank-client", dense, sparse, history,
              candidates, service;
  bool health = false, info = false;
  int64_t timeout_ms = 5000;
  FlagParser flags(
      "jagrank-client: send one Rank request and print one 'item_id score' line per candidate.\n"
      "  jagrank-client --candidates 11,12,13 --history 5,6,7 --sparse 'user_country=3;user_segments=7,9'\n"
      "  jagrank-client --request-json tools/example_request.json   (proto3 JSON of jagrank.v1.RankRequest)\n"
      "  jagrank-client --health | --info");
  flags.Add("address", &address, "server host:port");
  flags.Add("timeout-ms", &timeout_ms, "call deadline");
  flags.Add("health", &health, "check grpc.health.v1 for --service; exit 0 only when SERVING");
  flags.Add("service", &service, "service name for --health ('' = the whole server)");
  flags.Add("info", &info, "print GetModelInfo");
  flags.Add("request-json", &request_json, "file with the request as proto3 JSON (other request flags are ignored)");
  flags.Add("request-id", &request_id, "request_id");
  flags.Add("dense", &dense, "comma-separated dense values (default: zeros, count from GetModelInfo)");
  flags.Add("sparse", &sparse, "name=id,id;name=id ...");
  flags.Add("history", &history, "comma-separated history item ids, oldest first");
  flags.Add("candidates", &candidates, "comma-separated candidate item ids");
  std::string tls_ca, tls_cert, tls_key;
  flags.Add("tls-ca", &tls_ca, "PEM CA bundle to verify the server with: connect over TLS");
  flags.Add("tls-cert", &tls_cert, "PEM client certificate chain for mTLS (with --tls-key; needs --tls-ca)");
  flags.Add("tls-key", &tls_key, "PEM private key of --tls-cert");
  Status parsed = flags.Parse(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "jagrank-client: %s\n", parsed.message().c_str());
    return 2;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (!health && !info && request_json.empty() && candidates.empty()) {
    // Nothing to rank: an empty request would only earn INVALID_ARGUMENT.
    std::fprintf(stderr,
                 "jagrank-client: nothing to send: give --candidates or --request-json (or --health, --info)\n%s",
                 flags.Usage().c_str());
    return 2;
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  Status tls = MakeChannelCredentials(tls_ca, tls_cert, tls_key, &credentials);
  if (!tls.ok()) {
    std::fprintf(stderr, "jagrank-client: %s\n", tls.message().c_str());
    return 2;
  }
  auto channel = grpc::CreateChannel(address, credentials);

  if (health) {
    auto stub = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext context;
    SetDeadline(&context, timeout_ms);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = stub->Check(&context, request, &response);
    if (!status.ok()) return Fail("health check", status);
    std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
    return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
  }

  auto stub = v1::Ranker::NewStub(channel);
  v1::ModelInfo model_info;
  const bool need_info = info || (request_json.empty() && dense.empty());
  if (need_info) {
    grpc::ClientContext context;
    SetDeadline(&context, timeout_ms);
    grpc::Status status = stub->GetModelInfo(&context, v1::GetModelInfoRequest(), &model_info);
    if (!status.ok()) return Fail("GetModelInfo", status);
  }
  if (info) {
    std::string text;
    google::protobuf::util::JsonPrintOptions options;
    options.add_whitespace = true;
    options.always_print_primitive_fields = true;
    (void)google::protobuf::util::MessageToJsonString(model_info, &text, options);
    std::fputs(text.c_str(), stdout);
    return 0;
  }

  v1::RankRequest request;
  if (!request_json.empty()) {
    std::ifstream in(request_json);
    if (!in) {
      std::fprintf(stderr, "jagrank-client: cannot open %s\n", request_json.c_str());
      return 2;
    }
    std::stringstream text;
    text << in.rdbuf();
    auto parsed_json = google::protobuf::util::JsonStringToMessage(text.str(), &request);
    if (!parsed_json.ok()) {
      std::fprintf(stderr, "jagrank-client: %s: %s\n", request_json.c_str(), parsed_json.ToString().c_str());
      return 2;
    }
  } else {
    request.set_request_id(request_id);
    std::vector<float> dense_values;
    std::vector<int64_t> ids;
    if (!ParseList(dense, &dense_values)) {
      std::fprintf(stderr, "jagrank-client: --dense: not a list of numbers\n");
      return 2;
    }
    if (dense.empty()) dense_values.assign(model_info.num_dense_features(), 0.0f);
    request.mutable_dense_features()->Add(dense_values.begin(), dense_values.end());
    std::stringstream features(sparse);
    std::string feature;
    while (std::getline(features, feature, ';')) {
      if (feature.empty()) continue;
      const size_t eq = feature.find('=');
      if (eq == std::string::npos || !ParseList(feature.substr(eq + 1), &ids)) {
        std::fprintf(stderr, "jagrank-client: --sparse: expected name=id,id;... got '%s'\n", feature.c_str());
        return 2;
      }
      auto* list = (*request.mutable_sparse_features())[feature.substr(0, eq)].mutable_ids();
      list->Add(ids.begin(), ids.end());
    }
    if (!ParseList(history, &ids)) {
      std::fprintf(stderr, "jagrank-client: --history: not a list of ids\n");
      return 2;
    }
    request.mutable_history()->Add(ids.begin(), ids.end());
    if (!ParseList(candidates, &ids)) {
      std::fprintf(stderr, "jagrank-client: --candidates: not a list of ids\n");
      return 2;
    }
    request.mutable_candidate_item_ids()->Add(ids.begin(), ids.end());
  }

  grpc::ClientContext context;
  SetDeadline(&context, timeout_ms);
  v1::RankResponse response;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status status = stub->Rank(&context, request, &response);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) return Fail("Rank", status);
  std::printf("# request_id=%s model_version=%s candidates=%d latency_ms=%.3f\n", response.request_id().c_str(),
              response.model_version().c_str(), response.scores_size(), ms);
  for (int i = 0; i < response.scores_size(); ++i) {
    const long long item = i < request.candidate_item_ids_size() ? request.candidate_item_ids(i) : -1;
    std::printf("%lld %.6f\n", item, response.scores(i));
  }
  return 0;
}

}  // namespace
}  // namespace jagrank

int main(int argc, char** argv) {
  jagrank::ConfigureGrpcProcess();
  return jagrank::Main(argc, argv);
}
