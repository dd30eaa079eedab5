from django.contrib import admin
from django.urls import include, path

from tests.fixtures.testapp.admin import shop_admin

urlpatterns = [
    path("admin/", admin.site.urls),
    path("shop-admin/", shop_admin.urls),
    path("workflows/", include("django_openworkflow.urls")),
]
