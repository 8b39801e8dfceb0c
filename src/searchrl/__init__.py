"""SearchRL: train language models to reason with a search engine through reinforcement learning."""

__version__ = "0.1.0"
