from django.apps import AppConfig


class HarnessConfig(AppConfig):
    name = "bench.harness"
    label = "harness"
