"""The lock protocols without a cloud: their JSONata pieces evaluated, their expressions and
errors, and the executable models (``fair_model.py``, ``fair_coalesce_model.py``,
``shared_model.py``) explored over every interleaving. No deployment, no runtime; the fixtures
these tests use are the root conftest's."""
