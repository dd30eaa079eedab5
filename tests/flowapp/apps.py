from django.apps import AppConfig


class FlowAppConfig(AppConfig):
    name = "tests.flowapp"
    label = "flowapp"
    default_auto_field = "django.db.models.BigAutoField"
