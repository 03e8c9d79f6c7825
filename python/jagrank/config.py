"""The model config (model.yaml): the same keys, defaults and checks as the
server's model/config.cc, so a file this module accepts the server accepts."""

import dataclasses
from typing import List

_KNOWN_KEYS = ("name", "embedding_dim", "num_dense_features", "sparse_features", "item_rows",
               "max_history_len", "attention_heads", "bottom_mlp", "top_mlp", "seed")
_MAX_TABLE_ELEMENTS = 1 << 36
_MAX_WIDTH = 1 << 16
_MAX_SPARSE_FEATURES = 256


@dataclasses.dataclass
class SparseFeature:
    name: str            # also the weight name suffix: embeddings.<name>
    num_rows: int        # row = uint64(id) % num_rows


@dataclasses.dataclass
class ModelConfig:
    name: str = "jagrank-dlrm"
    embedding_dim: int = 64                      # d
    num_dense_features: int = 13
    sparse_features: List[SparseFeature] = dataclasses.field(default_factory=list)  # interaction order
    item_rows: int = 1000000
    max_history_len: int = 1024
    attention_heads: int = 2                     # H; d % H == 0
    bottom_mlp: List[int] = dataclasses.field(default_factory=lambda: [256, 128, 64])  # last == d
    top_mlp: List[int] = dataclasses.field(default_factory=lambda: [512, 256, 1])      # last == 1
    seed: int = 42

    @property
    def num_interaction_vectors(self) -> int:    # n = F + 3
        return len(self.sparse_features) + 3

    @property
    def top_mlp_input_width(self) -> int:        # d + n(n-1)/2
        n = self.num_interaction_vectors
        return self.embedding_dim + n * (n - 1) // 2

    @property
    def sparse_feature_names(self) -> List[str]:
        return [f.name for f in self.sparse_features]

    def validate(self) -> None:
        """Raises ValueError naming the bad key and the limit."""
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("name: must not be empty")
        d = self.embedding_dim
        _check_int("embedding_dim", d, 1, _MAX_WIDTH)
        _check_int("num_dense_features", self.num_dense_features, 1, _MAX_WIDTH)
        if len(self.sparse_features) > _MAX_SPARSE_FEATURES:
            raise ValueError(f"sparse_features: {len(self.sparse_features)} features, at most {_MAX_SPARSE_FEATURES}")
        seen = set()
        for i, f in enumerate(self.sparse_features):
            key = f"sparse_features[{i}]"
            if (not isinstance(f.name, str) or not 1 <= len(f.name) <= 128
                    or not all(c.isascii() and (c.isalnum() or c == "_") for c in f.name)):
                raise ValueError(f"{key}.name = '{f.name}': must be 1-128 characters of [A-Za-z0-9_]")
            if f.name == "item":
                raise ValueError(f"{key}.name = 'item': reserved (embeddings.item is the item table)")
            if f.name in seen:
                raise ValueError(f"{key}.name = '{f.name}': duplicate feature name")
            seen.add(f.name)
            _check_int(f"{key}.num_rows", f.num_rows, 1, _MAX_TABLE_ELEMENTS // d)
        _check_int("item_rows", self.item_rows, 1, _MAX_TABLE_ELEMENTS // d)
        _check_int("max_history_len", self.max_history_len, 1, 1 << 20)
        if not isinstance(self.attention_heads, int) or self.attention_heads <= 0 or d % self.attention_heads:
            raise ValueError(f"attention_heads = {self.attention_heads}: must be positive and divide "
                             f"embedding_dim = {d}")
        for key, widths in (("bottom_mlp", self.bottom_mlp), ("top_mlp", self.top_mlp)):
            if not widths:
                raise ValueError(f"{key}: must list at least one layer width")
            for i, w in enumerate(widths):
                _check_int(f"{key}[{i}]", w, 1, _MAX_WIDTH)
        if self.bottom_mlp[-1] != d:
            raise ValueError(f"bottom_mlp: last width {self.bottom_mlp[-1]} must equal embedding_dim = {d}")
        if self.top_mlp[-1] != 1:
            raise ValueError(f"top_mlp: last width {self.top_mlp[-1]} must be 1 (one logit per candidate)")
        if not isinstance(self.seed, int) or not 0 <= self.seed < 1 << 64:
            raise ValueError(f"seed = {self.seed}: must be an integer in [0, 2^64)")

    @classmethod
    def from_dict(cls, doc: dict) -> "ModelConfig":
        if not isinstance(doc, dict):
            raise ValueError("model config: expected a YAML mapping at the top level")
        for key in doc:
            if key not in _KNOWN_KEYS:
                raise ValueError(f"model config: unknown key '{key}'")
        c = cls()
        for key in ("name", "embedding_dim", "num_dense_features", "item_rows", "max_history_len",
                    "attention_heads", "seed"):
            if key in doc:
                setattr(c, key, doc[key])
        for key in ("bottom_mlp", "top_mlp"):
            if key in doc:
                if not isinstance(doc[key], list):
                    raise ValueError(f"{key}: expected a list of integers")
                setattr(c, key, list(doc[key]))
        if "sparse_features" in doc:
            features = doc["sparse_features"]
            if not isinstance(features, list):
                raise ValueError("sparse_features: expected a list of {name, num_rows}")
            c.sparse_features = []
            for i, item in enumerate(features):
                key = f"sparse_features[{i}]"
                if not isinstance(item, dict):
                    raise ValueError(f"{key}: expected a mapping {{name, num_rows}}")
                for k in item:
                    if k not in ("name", "num_rows"):
                        raise ValueError(f"{key}: unknown key '{k}'")
                for k in ("name", "num_rows"):
                    if k not in item:
                        raise ValueError(f"{key}.{k}: missing")
                c.sparse_features.append(SparseFeature(str(item["name"]), item["num_rows"]))
        c.validate()
        return c

    @classmethod
    def from_yaml(cls, path: str) -> "ModelConfig":
        import yaml  # PyYAML; only reading needs it

        class UniqueKeyLoader(yaml.SafeLoader):
            # PyYAML keeps the last of a repeated key, yaml-cpp the first:
            # both readers refuse it instead, so they never disagree.
            def construct_mapping(self, node, deep=False):
                seen = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=deep)
                    if key in seen:
                        raise ValueError(f"{path}: key '{key}' appears twice")
                    seen.add(key)
                return super().construct_mapping(node, deep)

        with open(path, "r", encoding="utf-8") as f:
            try:
                doc = yaml.load(f, Loader=UniqueKeyLoader)
            except yaml.YAMLError as e:
                raise ValueError(f"{path}: YAML syntax error: {e}") from None
        try:
            return cls.from_dict(doc)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def to_yaml(self) -> str:
        """YAML that the server's model config parser (and from_yaml) reads back equal."""
        self.validate()
        lines = [f'name: "{self.name}"', f"embedding_dim: {self.embedding_dim}",
                 f"num_dense_features: {self.num_dense_features}"]
        if self.sparse_features:
            lines.append("sparse_features:")
            lines += [f"  - {{name: {f.name}, num_rows: {f.num_rows}}}" for f in self.sparse_features]
        else:
            lines.append("sparse_features: []")
        lines += [f"item_rows: {self.item_rows}", f"max_history_len: {self.max_history_len}",
                  f"attention_heads: {self.attention_heads}",
                  f"bottom_mlp: [{', '.join(map(str, self.bottom_mlp))}]",
                  f"top_mlp: [{', '.join(map(str, self.top_mlp))}]", f"seed: {self.seed}"]
        return "\n".join(lines) + "\n"

    def expected_shapes(self) -> dict:
        """Every tensor name of the weight contract -> its shape."""
        d = self.embedding_dim
        shapes = {}
        fan_in = self.num_dense_features
        for i, w in enumerate(self.bottom_mlp):
            shapes[f"bottom_mlp.{i}.weight"] = (w, fan_in)
            shapes[f"bottom_mlp.{i}.bias"] = (w,)
            fan_in = w
        fan_in = self.top_mlp_input_width
        for i, w in enumerate(self.top_mlp):
            shapes[f"top_mlp.{i}.weight"] = (w, fan_in)
            shapes[f"top_mlp.{i}.bias"] = (w,)
            fan_in = w
        for f in self.sparse_features:
            shapes[f"embeddings.{f.name}"] = (f.num_rows, d)
        shapes["embeddings.item"] = (self.item_rows, d)
        shapes["history.position"] = (self.max_history_len, d)
        for m in ("q", "k", "v", "o"):
            shapes[f"history.attn.{m}"] = (d, d)
        return shapes


def _check_int(key, value, low, high):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key}: cannot read '{value}' as an integer")
    if not low <= value <= high:
        raise ValueError(f"{key} = {value}: must be in [{low}, {high}]")
