"""A gRPC client of jagrank-server:

    from jagrank.client import Ranker
    ranker = Ranker("localhost:8500")          # or "unix:/path/to/socket"
    scores = ranker.rank({"dense": [0.1] * 13, "sparse": {"user_country": [7]},
                          "history": [11, 12, 13], "candidates": [101, 102, 103]})

Requests are the dicts of JagRankModel.rank. Errors the server returns
(INVALID_ARGUMENT naming the field, RESOURCE_EXHAUSTED, ...) raise
grpc.RpcError with .code() and .details().

Many requests at a high rate go over one RankStream call (docs/rank_stream.md):

    for request_id, scores in ranker.rank_stream(requests):   # in completion order
        ...

where a request that failed yields a RankStreamError (code, details, request_id)
in place of its scores, and the other requests go on.

The stubs (package jagrank_stubs) are generated, never checked in: CMake
writes them to build/python/ (put it on PYTHONPATH beside python/), and
`pip install ./python` puts them in the wheel.
"""

from typing import Dict, Iterable, Iterator, List, Optional, Tuple, Union

import grpc

try:
    from jagrank_stubs import health_pb2, health_pb2_grpc, ranker_pb2, ranker_pb2_grpc
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "jagrank.client needs the generated gRPC stubs (package jagrank_stubs): build the repository "
        "(cmake target jagrank_python_stubs writes build/python/jagrank_stubs) and add build/python to "
        "PYTHONPATH, or `pip install ./python` with protoc and python3-grpc-tools present "
        f"(import failed: {e})") from e


def make_request(request: dict, request_id: str = "") -> "ranker_pb2.RankRequest":
    """A request dict {"dense", "sparse", "history", "candidates"} -> RankRequest."""
    for key in request:
        if key not in ("dense", "sparse", "history", "candidates"):
            raise ValueError(f"unknown key '{key}' (dense, sparse, history, candidates)")
    message = ranker_pb2.RankRequest(request_id=request_id,
                                     dense_features=[float(v) for v in request.get("dense", ())],
                                     history=[int(v) for v in request.get("history", ())],
                                     candidate_item_ids=[int(v) for v in request.get("candidates", ())])
    for name, ids in (request.get("sparse") or {}).items():
        message.sparse_features[name].ids.extend(int(v) for v in ids)
    return message


class RankStreamError(Exception):
    """One request of a RankStream failed: its gRPC status code and message
    (the status a unary Rank call would have ended with)."""

    def __init__(self, request_id: str, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.request_id = request_id
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def _status_code(number: int) -> grpc.StatusCode:
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code
    return grpc.StatusCode.UNKNOWN


class Ranker:
    """One channel to a jagrank-server. Thread-safe (gRPC channels are)."""

    def __init__(self, address: str, timeout_s: float = 30.0, options: Optional[list] = None):
        self.address = address
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(address, options=options or [])
        self._ranker = ranker_pb2_grpc.RankerStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def rank(self, request: dict, request_id: str = "", timeout_s: Optional[float] = None) -> List[float]:
        """One score in (0, 1) per candidate, in the request's order."""
        response = self._ranker.Rank(make_request(request, request_id), timeout=timeout_s or self.timeout_s)
        return list(response.scores)

    def rank_many(self, requests: List[dict], timeout_s: Optional[float] = None) -> List[List[float]]:
        """Sends every request at once (the server batches them) and returns
        their scores in order."""
        futures = [self._ranker.Rank.future(make_request(r, str(i)), timeout=timeout_s or self.timeout_s)
                   for i, r in enumerate(requests)]
        return [list(f.result().scores) for f in futures]

    def rank_response(self, request: dict, request_id: str = "",
                      timeout_s: Optional[float] = None) -> "ranker_pb2.RankResponse":
        """The whole RankResponse (request_id, scores, model_version)."""
        return self._ranker.Rank(make_request(request, request_id), timeout=timeout_s or self.timeout_s)

    def rank_stream(self, requests: Iterable[Union[dict, Tuple[str, dict]]], request_timeout_ms: int = 0,
                    timeout_s: Optional[float] = None
                    ) -> Iterator[Tuple[str, Union[List[float], RankStreamError]]]:
        """Sends `requests` (dicts, or (request_id, dict) pairs; a dict's id is
        its index as a string) over one RankStream call and yields
        (request_id, scores) as the answers arrive, in any order, with a
        RankStreamError in place of the scores of a request that failed. Ids
        must be unique: they are how answers are matched. Each request
        expires after `request_timeout_ms` (0 = only the call's deadline,
        `timeout_s`). `requests` is consumed as the server reads; the call
        ends once every answer is in. A failure of the whole call (the server
        refusing the stream, draining, the deadline) raises grpc.RpcError."""
        def messages():
            for i, item in enumerate(requests):
                request_id, request = item if isinstance(item, tuple) else (str(i), item)
                yield ranker_pb2.RankStreamRequest(request=make_request(request, request_id),
                                                   timeout_ms=request_timeout_ms)

        for answer in self._ranker.RankStream(messages(), timeout=timeout_s or self.timeout_s):
            if answer.WhichOneof("result") == "response":
                yield answer.request_id, list(answer.response.scores)
            else:
                yield answer.request_id, RankStreamError(answer.request_id, _status_code(answer.error.code),
                                                         answer.error.message)

    def info(self, timeout_s: Optional[float] = None) -> Dict[str, object]:
        """GetModelInfo as a dict: name, version, embedding_dim, num_dense_features,
        sparse_feature_names, max_history_len, max_candidates_per_request, device,
        attention, attention_heads, item_rows, weights_bytes (and any later field)."""
        info = self._ranker.GetModelInfo(ranker_pb2.GetModelInfoRequest(), timeout=timeout_s or self.timeout_s)
        out = {}
        for field in info.DESCRIPTOR.fields:
            value = getattr(info, field.name)
            # Repeated fields are containers; newer protobuf runtimes (upb) drop
            # FieldDescriptor.label, so tell them apart by the value.
            repeated = not isinstance(value, (str, bytes, int, float, bool))
            out[field.name] = list(value) if repeated else value
        return out

    def health(self, service: str = "", timeout_s: Optional[float] = None) -> str:
        """grpc.health.v1 status of `service` ("" = the server, or "jagrank.v1.Ranker"):
        "SERVING", "NOT_SERVING", ... NOT_FOUND for an unknown service raises grpc.RpcError."""
        response = self._health.Check(health_pb2.HealthCheckRequest(service=service),
                                      timeout=timeout_s or self.timeout_s)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Ranker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
