/* Live refresh of the job list, a job's page and the dashboard (django-cronqueue).
 *
 * Every few seconds the page fetches its own URL (same query string: the filters, the
 * search and the page stay) and swaps in the regions that change. On the job list those
 * are the status counts, the rows (each row's checkbox element is kept, so the selection
 * and Django's "select all" stay), the pagination and the selection counter; the search
 * box and the action menu are never touched. On a job's page and on the dashboard it is
 * #content-main (and the subtitle, the breadcrumbs and the title, which name the job and
 * its status), unless a form control in it has the focus or was changed. The window's
 * scroll position is kept. A control pauses the refresh and picks the rate (remembered in
 * localStorage); a hidden tab does not refresh. Without JavaScript the page stays as
 * served.
 */
'use strict';
{
    const RATE_KEY = 'django_cronqueue.live.rate';
    const HEADER = 'X-CronQueue-Live';

    function storedRate(select) {
        let rate = null;
        try {
            rate = window.localStorage.getItem(RATE_KEY);
        } catch (error) {
            rate = null;  // storage refused (private mode): the default rate
        }
        const allowed = Array.from(select.options).map((option) => option.value);
        return allowed.includes(rate) ? rate : select.value;
    }

    function rememberRate(rate) {
        try {
            window.localStorage.setItem(RATE_KEY, rate);
        } catch (error) {
            // nothing to do: the rate holds for this page
        }
    }

    function isDirty(control) {
        if (control.type === 'checkbox' || control.type === 'radio') {
            return control.checked !== control.defaultChecked;
        }
        if (control.tagName === 'SELECT') {
            return Array.from(control.options).some((o) => o.selected !== o.defaultSelected);
        }
        return 'defaultValue' in control && control.value !== control.defaultValue;
    }

    /* Whether swapping ``region`` would lose what the user is doing in it. */
    function isBusy(region) {
        const active = document.activeElement;
        if (active && active !== document.body && region.contains(active) &&
                active.matches('input, select, textarea, button')) {
            return true;
        }
        return Array.from(region.querySelectorAll('input, select, textarea'))
            .some((control) => control.type !== 'hidden' && isDirty(control));
    }

    function replaceWith(oldNode, newNode) {
        if (oldNode && newNode) {
            oldNode.replaceWith(document.importNode(newNode, true));
        }
    }

    /* The open state of each <details> of ``region``, by position. */
    function openDetails(region) {
        return Array.from(region.querySelectorAll('details')).map((d) => d.open);
    }

    function restoreDetails(region, states) {
        region.querySelectorAll('details').forEach((details, index) => {
            if (index < states.length) {
                details.open = states[index];
            }
        });
    }

    /* -- the job list */

    function checkboxOf(row) {
        return row.querySelector('input.action-select');
    }

    function swapRows(tbody, newTbody, acrossSelected) {
        const kept = new Map();
        tbody.querySelectorAll('input.action-select').forEach((box) => kept.set(box.value, box));
        const focused = document.activeElement;
        const rows = Array.from(newTbody.rows).map((row) => {
            const imported = document.importNode(row, true);
            const fresh = checkboxOf(imported);
            if (fresh && kept.has(fresh.value)) {
                fresh.replaceWith(kept.get(fresh.value));  // the same element: checked, listeners
            } else if (fresh && acrossSelected) {
                fresh.checked = true;  // every matching job is selected
            }
            return imported;
        });
        tbody.replaceChildren(...rows);
        if (focused && focused !== document.activeElement && tbody.contains(focused)) {
            focused.focus({preventScroll: true});
        }
    }

    function setHidden(form, selector, hidden) {
        form.querySelectorAll(selector).forEach((el) => el.classList.toggle('hidden', hidden));
    }

    /* The rows' selected class, the counter and the "select all" toggle, from the rows now
     * shown (Django's actions.js counts the checkboxes it saw when the page loaded). */
    function syncSelection(form) {
        const boxes = Array.from(form.querySelectorAll('tr input.action-select'));
        boxes.forEach((box) => box.closest('tr').classList.toggle('selected', box.checked));
        const counter = form.querySelector('.action-counter');
        if (!counter) {
            return;
        }
        const selected = boxes.filter((box) => box.checked).length;
        const total = Number(counter.dataset.actionsIcnt);
        const text = '%(sel)s of %(cnt)s selected';
        counter.textContent = window.interpolate
            ? window.interpolate(window.ngettext(text, text, selected), {sel: selected, cnt: total}, true)
            : selected + ' of ' + total + ' selected';
        const toggle = document.getElementById('action-toggle');
        const all = boxes.length > 0 && selected === boxes.length;
        if (toggle) {
            toggle.checked = all;
        }
        const across = form.querySelector('input.select-across');
        if (across && across.value === '1') {
            return;  // "All N selected" stays shown
        }
        setHidden(form, '.actions span.question', !all);
        setHidden(form, '.actions span.clear', true);
        setHidden(form, '.actions span.all', true);
        setHidden(form, '.actions span.action-counter', false);
    }

    /* The list was empty and has rows now: the form is swapped whole, and Django's
     * actions.js, which found no rows at load, is started on them. */
    function fillEmptyList(form, newForm) {
        if (isBusy(form)) {
            return true;  // try again at the next turn
        }
        form.replaceChildren(...Array.from(newForm.childNodes, (n) => document.importNode(n, true)));
        const boxes = form.querySelectorAll('tr input.action-select');
        if (boxes.length > 0 && typeof window.Actions === 'function') {
            window.Actions(boxes);
        }
        return true;
    }

    function refreshChangelist(doc) {
        const form = document.getElementById('changelist-form');
        const newForm = doc.getElementById('changelist-form');
        if (!form || !newForm) {
            return false;
        }
        replaceWith(document.querySelector('.cq-counts'), doc.querySelector('.cq-counts'));
        const tbody = form.querySelector('#result_list tbody');
        const newTbody = newForm.querySelector('#result_list tbody');
        if (!tbody && newTbody) {
            return fillEmptyList(form, newForm);
        }
        if (tbody) {
            const across = form.querySelector('input.select-across');
            const emptyBody = document.createElement('tbody');
            swapRows(tbody, newTbody || emptyBody, Boolean(across && across.value === '1'));
        }
        const counter = form.querySelector('.action-counter');
        const newCounter = newForm.querySelector('.action-counter');
        if (counter && newCounter) {
            counter.dataset.actionsIcnt = newCounter.dataset.actionsIcnt;
        }
        ['.actions span.all', '.actions span.question a'].forEach((selector) => {
            const [old, fresh] = [form.querySelector(selector), newForm.querySelector(selector)];
            if (old && fresh) {
                old.textContent = fresh.textContent;
            }
        });
        replaceWith(form.querySelector('.paginator'), newForm.querySelector('.paginator'));
        const estimate = form.querySelector('.cq-estimate');
        const newEstimate = newForm.querySelector('.cq-estimate');
        if (estimate && !newEstimate) {
            estimate.remove();
        } else if (estimate) {
            replaceWith(estimate, newEstimate);
        } else if (newEstimate) {
            form.querySelector('.paginator').after(document.importNode(newEstimate, true));
        }
        syncSelection(form);
        return true;
    }

    /* -- a job's page and the dashboard */

    function refreshPage(doc) {
        const region = document.getElementById('content-main');
        const fresh = doc.getElementById('content-main');
        if (!region || !fresh) {
            return false;
        }
        if (isBusy(region)) {
            return true;  // try again at the next turn
        }
        const details = openDetails(region);
        region.replaceChildren(...Array.from(fresh.childNodes, (n) => document.importNode(n, true)));
        restoreDetails(region, details);
        // Django 6.0 moved the object tools (a job's buttons) out of #content-main.
        const tools = document.querySelector('ul.object-tools');
        if (tools && !region.contains(tools)) {
            replaceWith(tools, doc.querySelector('ul.object-tools'));
        }
        // What names the page may say its status too: "#81 (pending)".
        // Django 5.2's and 6.0's places for the subtitle and the breadcrumbs.
        const subtitle = '#content > h2, #content > .titles-and-tools h2';
        replaceWith(document.querySelector(subtitle), doc.querySelector(subtitle));
        replaceWith(document.querySelector('.breadcrumbs'), doc.querySelector('.breadcrumbs'));
        document.title = doc.title;
        return true;
    }

    /* -- the control and the timer */

    function start(control) {
        const mode = control.dataset.cqLive;
        const toggle = control.querySelector('.cq-live-toggle');
        const select = control.querySelector('.cq-live-rate');
        const state = control.querySelector('.cq-live-state');
        let paused = false;
        let stopped = false;
        let timer = null;
        let inFlight = false;

        select.value = storedRate(select);
        control.hidden = false;

        function show(text) {
            state.textContent = text;
        }

        function schedule() {
            window.clearTimeout(timer);
            timer = null;
            if (!paused && !stopped && document.visibilityState === 'visible') {
                timer = window.setTimeout(refresh, Number(select.value) * 1000);
            }
        }

        function stop(text) {
            stopped = true;
            toggle.disabled = true;
            select.disabled = true;
            show(text);
            schedule();
        }

        async function refresh() {
            if (inFlight || paused || stopped) {
                return;
            }
            inFlight = true;
            try {
                const response = await fetch(window.location.href, {
                    headers: {[HEADER]: '1'},
                    credentials: 'same-origin',
                    cache: 'no-store',
                });
                if (response.redirected || !response.ok) {
                    stop('Live refresh stopped: this page answered ' +
                        (response.redirected ? 'with another page' : response.status) +
                        '. Reload it.');
                    return;
                }
                const doc = new DOMParser().parseFromString(await response.text(), 'text/html');
                if (paused) {
                    return;  // paused while the page was on its way
                }
                const x = window.scrollX;
                const y = window.scrollY;
                const done = mode === 'changelist' ? refreshChangelist(doc) : refreshPage(doc);
                window.scrollTo(x, y);
                if (!done) {
                    stop('The page changed shape: reload it to see it.');
                    return;
                }
                const now = new Date();
                control.dataset.refreshed = String(now.getTime());
                show('updated ' + now.toLocaleTimeString());
            } catch (error) {
                show('refresh failed (' + error.message + '); trying again');
            } finally {
                inFlight = false;
                schedule();
            }
        }

        toggle.addEventListener('click', () => {
            paused = !paused;
            toggle.textContent = paused ? 'Resume' : 'Pause';
            toggle.setAttribute('aria-pressed', String(paused));
            control.classList.toggle('cq-live-paused', paused);
            show(paused ? 'paused' : '');
            if (paused) {
                schedule();
            } else {
                refresh();
            }
        });
        select.addEventListener('change', () => {
            rememberRate(select.value);
            schedule();
        });
        document.addEventListener('visibilitychange', () => {
            if (document.visibilityState === 'visible' && !paused && !stopped) {
                refresh();
            } else {
                schedule();  // hidden: the timer stops
            }
        });
        if (mode === 'changelist') {
            // After Django's own handlers (they sit on the table and the checkbox).
            const form = document.getElementById('changelist-form');
            if (form) {
                form.addEventListener('change', (event) => {
                    if (event.target.matches('input.action-select, #action-toggle')) {
                        syncAfterDjango(form, event.target);
                    }
                });
                form.addEventListener('click', (event) => {
                    if (event.target.matches('.actions span.clear a')) {
                        syncAfterDjango(form, document.getElementById('action-toggle'));
                    }
                });
            }
        }
        schedule();
    }

    /* Django's actions.js checks only the checkboxes of the rows it saw at load: after a
     * refresh, "select all on this page" must check the new rows too. */
    function syncAfterDjango(form, target) {
        if (target && target.id === 'action-toggle') {
            form.querySelectorAll('tr input.action-select').forEach((box) => {
                box.checked = target.checked;
            });
        }
        syncSelection(form);
    }

    function ready(fn) {
        if (document.readyState !== 'loading') {
            fn();
        } else {
            document.addEventListener('DOMContentLoaded', fn);
        }
    }

    ready(() => document.querySelectorAll('[data-cq-live]').forEach(start));
}
