"""glmops: provision GPU hosts and serve GLM-5 with vLLM, Ansible-style, over real SSH."""

__version__ = "0.1.0"
