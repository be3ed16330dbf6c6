// The preview of a dynamic schedule's expression as the user types: the admin's preview
// endpoint (GET, staff only) answers with the description and next five runs as JSON,
// or a 400 with the problem; everything is written as text, never as HTML.
"use strict";
(function () {
  const box = document.getElementById("cq-preview");
  const expression = document.getElementById("id_expression");
  const zone = document.getElementById("id_tz");
  if (!box || !expression || !zone) {
    return;
  }
  let timer = null;
  let asked = 0;

  function element(tag, className, text) {
    const node = document.createElement(tag);
    node.className = className;
    node.textContent = text;
    return node;
  }

  function show(answer) {
    box.replaceChildren();
    if (answer.error) {
      box.appendChild(element("p", "cq-preview-error", answer.error));
      return;
    }
    box.appendChild(element("p", "cq-preview-description", answer.description || "-"));
    const list = element("ol", "cq-runs", "");
    for (const run of answer.runs) {
      const item = element("li", "", run.local + " ");
      item.appendChild(element("span", "cq-quiet", "(" + run.utc + ")"));
      list.appendChild(item);
    }
    box.appendChild(list);
  }

  function ask() {
    const number = ++asked;
    const query = new URLSearchParams({ expression: expression.value, tz: zone.value });
    fetch(box.dataset.url + "?" + query.toString(), { credentials: "same-origin" })
      .then((response) => response.json())
      .then((answer) => {
        if (number === asked) {
          show(answer);
        }
      })
      .catch(() => {});
  }

  function later() {
    clearTimeout(timer);
    timer = setTimeout(ask, 300);
  }

  expression.addEventListener("input", later);
  zone.addEventListener("input", later);
  zone.addEventListener("change", later);
})();
