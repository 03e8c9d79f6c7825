"""jagrank: the PyTorch twin of the jagrank ranking server's model
(jagrank.model.JagRankModel), its config (jagrank.config), the safetensors
format it exchanges with the server (jagrank.safetensors), a training example
(python3 -m jagrank.train_example) and a gRPC client (jagrank.client.Ranker).

The model contract these follow is docs/model.md in the jagrank repository.
"""

__version__ = "0.1.0"
