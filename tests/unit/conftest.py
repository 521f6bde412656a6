"""Property tests count examples, never CPU time: a loaded machine (CI on two cores, the suite's own
processes beside it) draws inputs and runs each example ten times slower, and Hypothesis's default
200 ms deadline and its too-slow health check then fail a correct test by chance."""

from hypothesis import HealthCheck, settings

settings.register_profile("examples-not-time", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("examples-not-time")
