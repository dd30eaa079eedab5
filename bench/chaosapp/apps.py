from django.apps import AppConfig


class ChaosAppConfig(AppConfig):
    name = "bench.chaosapp"
    label = "chaosapp"
