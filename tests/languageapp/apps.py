from django.apps import AppConfig


class LanguageAppConfig(AppConfig):
    name = "tests.languageapp"
    label = "languageapp"
