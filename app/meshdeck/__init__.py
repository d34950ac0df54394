"""meshdeck: plan, launch and watch DeepSeek 3.2 on your own GPU servers."""

__version__ = "0.2.0"
