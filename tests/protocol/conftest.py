"""The lock protocols without a cloud: their JSONata pieces evaluated, their expressions and
errors, and the executable models (``fair_model.py``, ``fair_coalesce_model.py``,
``shared_model.py``) explored over every interleaving, and the rate limit's (``rate_model.py``)
over randomized timings. No deployment, no runtime; the fixtures
these tests use are the root conftest's."""
