from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from .jobs import flaky_export, send_receipt
from .models import Order


def home(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        with transaction.atomic():
            order = Order.objects.create(email=request.POST.get("email") or "demo@example.com")
            # Enqueued in the same transaction as the order: both commit, or neither.
            send_receipt.enqueue(order_id=order.pk)
            if request.POST.get("fail"):
                flaky_export.enqueue(order_id=order.pk)
        return redirect("home")
    orders = Order.objects.order_by("-id")[:20]
    return render(request, "shop/home.html", {"orders": orders})
