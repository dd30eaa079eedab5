/*
 * Live pages for django-openworkflow's admin: the run page, the run list and the dashboard refresh
 * themselves. No framework, no inline script (Content-Security-Policy friendly).
 *
 * A page that opts in carries one element with data-owf-live="<seconds>" (the indicator, rendered by
 * django_openworkflow/live.html, hidden until this script shows it). Every <seconds> while the tab is
 * visible, this script fetches the page's own URL again, with the same query string and the user's
 * session, parses it and swaps each element marked data-owf-live-region="<name>" whose markup changed.
 * A region the user is working in waits: a focused field or button in it, text selected in it, a
 * ticked row on the list, a field changed and not yet sent. An open <details> stays open, the page
 * keeps its scroll. Errors back off; a page that can no longer be fetched (logged out, permission
 * gone, run deleted) stops; a run that has finished stops after showing its last state.
 */
"use strict";
{
    const HEADER = "X-OpenWorkflow-Live";
    const MAX_BACKOFF_MS = 5 * 60 * 1000;
    const ROWS = "tr input.action-select";

    // Django's actions.js (the list's checkboxes) keeps the checkboxes it finds at load. Handed this
    // view instead, it always counts the rows on the page, so "select all" and the "n of m selected"
    // counter include the rows a refresh brought. This script is deferred: it runs before
    // DOMContentLoaded, when actions.js binds itself.
    const currentCheckboxes = {
        get length() { return document.querySelectorAll(ROWS).length; },
        forEach(fn) { document.querySelectorAll(ROWS).forEach(fn); },
        [Symbol.iterator]() { return document.querySelectorAll(ROWS)[Symbol.iterator](); },
    };
    const djangoActions = window.Actions;
    let actionsBound = false;
    if (typeof djangoActions === "function") {
        window.Actions = function (checkboxes, options) {
            actionsBound = true;
            return djangoActions(currentCheckboxes, options);
        };
    }

    function comparable(element) {
        // A CSRF token is masked afresh on every response: not a change worth a swap.
        return element.outerHTML.replace(/(name="csrfmiddlewaretoken" value=")[^"]*/g, "$1");
    }

    function regionNamed(root, name) {
        return root.querySelector('[data-owf-live-region="' + CSS.escape(name) + '"]');
    }

    // Where an element sits in a region: its nearest ancestor with an id, then child indices from
    // there, so that a journal row's <details> is found again in the row's fresh markup.
    function keyOf(element, root) {
        const path = [];
        let node = element;
        while (node !== root && !node.id) {
            path.push(Array.prototype.indexOf.call(node.parentNode.children, node));
            node = node.parentNode;
        }
        return { id: node === root ? "" : node.id, path: path.reverse() };
    }

    function find(root, key) {
        let node = key.id ? root.querySelector("#" + CSS.escape(key.id)) : root;
        for (const index of key.path) node = node && node.children[index];
        return node || null;
    }

    // The same <details> in a region's fresh markup: by its class when it has one (an action's
    // confirmation, "Send a signal"), else by where it sits.
    function twinDetails(details, region, fresh) {
        if (details.className) {
            const selector = 'details[class="' + CSS.escape(details.className) + '"]';
            const index = Array.prototype.indexOf.call(region.querySelectorAll(selector), details);
            return fresh.querySelectorAll(selector)[index] || null;
        }
        const twin = find(fresh, keyOf(details, region));
        return twin && twin.tagName === "DETAILS" ? twin : null;
    }

    function changedField(field) {
        if (field.type === "hidden") return false;
        if (field.type === "checkbox" || field.type === "radio") return field.checked !== field.defaultChecked;
        if (field.tagName === "SELECT") {
            const options = Array.from(field.options);
            if (field.multiple) return options.some((option) => option.selected !== option.defaultSelected);
            const chosen = options.map((option) => option.defaultSelected).lastIndexOf(true);
            return field.selectedIndex !== (chosen < 0 ? 0 : chosen);
        }
        return field.value !== field.defaultValue;
    }

    function inUse(region) {
        const active = document.activeElement;
        if (active && active !== document.body && region.contains(active)) return true;
        const selection = window.getSelection();
        if (selection && !selection.isCollapsed && selection.containsNode(region, true)) return true;
        for (const field of region.querySelectorAll("input, select, textarea")) {
            if (field.matches("input.action-select, #action-toggle") && field.checked) return true;
            if (changedField(field)) return true;
        }
        return false;
    }

    function scrolledInside(region) {
        const scrolled = [];
        for (const element of region.querySelectorAll("*")) {
            if (element.scrollLeft || element.scrollTop) {
                scrolled.push([keyOf(element, region), element.scrollLeft, element.scrollTop]);
            }
        }
        return scrolled;
    }

    function swap(region, fresh) {
        const node = document.importNode(fresh, true);
        for (const details of region.querySelectorAll("details")) {
            const twin = twinDetails(details, region, node);
            if (twin) twin.open = details.open;
        }
        const scrolled = scrolledInside(region);
        region.replaceWith(node);
        for (const [key, left, top] of scrolled) {
            const twin = find(node, key);
            if (twin) {
                twin.scrollLeft = left;
                twin.scrollTop = top;
            }
        }
        return true;
    }

    function swapPaginator(page) {
        const paginator = document.querySelector("#changelist-form .paginator");
        const fresh = page.querySelector("#changelist-form .paginator");
        if (paginator && fresh) paginator.replaceWith(document.importNode(fresh, true));
    }

    // The list: only the table's rows and the counters' texts change, so that the table, its head and
    // the actions bar, which actions.js listens to, stay the same elements. The paginator below, which
    // counts the rows, changes with them.
    function swapRows(region, fresh, page) {
        const table = region.querySelector("#result_list");
        const freshTable = fresh.querySelector("#result_list");
        if (!table || !freshTable) {
            // The list was empty or is now: its whole markup differs.
            swap(region, fresh);
            if (!actionsBound && document.querySelector(ROWS) && typeof window.Actions === "function") {
                window.Actions(currentCheckboxes);
            }
            swapPaginator(page);
            return true;
        }
        if (document.querySelector(ROWS) && !actionsBound) return false; // actions.js holds the old rows
        table.tBodies[0].replaceChildren(
            ...Array.from(freshTable.tBodies[0].childNodes, (node) => document.importNode(node, true))
        );
        for (const selector of [".action-counter", ".actions .all", ".actions .question a"]) {
            const mine = region.querySelectorAll(selector);
            const theirs = fresh.querySelectorAll(selector);
            mine.forEach((element, index) => {
                if (!theirs[index]) return;
                element.textContent = theirs[index].textContent;
                if (theirs[index].dataset.actionsIcnt) element.dataset.actionsIcnt = theirs[index].dataset.actionsIcnt;
            });
        }
        swapPaginator(page);
        return true;
    }

    function start(indicator) {
        const seconds = Number(indicator.dataset.owfLive);
        if (!(seconds > 0) || indicator.hasAttribute("data-owf-live-finished")) return;
        const interval = seconds * 1000;
        const label = indicator.querySelector(".owf-live-text");
        const toggle = indicator.querySelector(".owf-live-toggle");
        const texts = indicator.dataset;
        const served = new Map(); // region name -> the markup the server last sent for it
        for (const region of document.querySelectorAll("[data-owf-live-region]")) {
            served.set(region.dataset.owfLiveRegion, comparable(region));
        }
        let state = "live"; // live, paused, stopped or finished
        let updatedAt = Date.now();
        let polledAt = Date.now();
        let held = false;
        let failures = 0;
        let retryAt = 0;
        let timer = null;
        let ticker = null;
        let polling = false;

        function fill(text, value) {
            return text.replace("%(seconds)s", String(Math.max(0, value)));
        }

        function render() {
            let text;
            if (state === "live" && failures) text = fill(texts.textRetrying, Math.ceil((retryAt - Date.now()) / 1000));
            else if (state === "live") {
                text = fill(texts.textLive, Math.round((Date.now() - updatedAt) / 1000));
                if (held) text += " · " + texts.textHeld;
            } else text = texts["text" + state.charAt(0).toUpperCase() + state.slice(1)];
            if (label.textContent !== text) label.textContent = text;
            indicator.dataset.owfLiveState = state === "live" && failures ? "retrying" : state;
            toggle.hidden = state === "stopped" || state === "finished";
            const button = state === "paused" ? texts.textResume : texts.textPause;
            if (toggle.textContent !== button) toggle.textContent = button;
        }

        function schedule(delay) {
            clearTimeout(timer);
            timer = setTimeout(poll, delay);
        }

        function end(how) {
            state = how;
            clearTimeout(timer);
            clearInterval(ticker);
            render();
        }

        function fail() {
            failures += 1;
            const delay = Math.min(interval * 2 ** failures, Math.max(MAX_BACKOFF_MS, interval));
            retryAt = Date.now() + delay;
            schedule(delay);
            render();
        }

        function apply(page) {
            // Keep what the user looks at where it is: the first region still on screen stays put.
            let anchor = null;
            for (const region of document.querySelectorAll("[data-owf-live-region]")) {
                const top = region.getBoundingClientRect();
                if (top.bottom > 0) {
                    anchor = [region.dataset.owfLiveRegion, top.top];
                    break;
                }
            }
            held = false;
            for (const region of document.querySelectorAll("[data-owf-live-region]")) {
                const name = region.dataset.owfLiveRegion;
                const fresh = regionNamed(page, name);
                if (!fresh) continue;
                const markup = comparable(fresh);
                if (served.get(name) === markup) continue;
                const swapped = !inUse(region) &&
                    (region.hasAttribute("data-owf-live-rows") ? swapRows(region, fresh, page) : swap(region, fresh));
                if (swapped) served.set(name, markup);
                else held = true;
            }
            const moved = anchor && regionNamed(document, anchor[0]);
            if (moved) {
                const delta = moved.getBoundingClientRect().top - anchor[1];
                if (delta) window.scrollBy(0, delta);
            }
        }

        async function poll() {
            clearTimeout(timer);
            if (state !== "live" || document.hidden || polling) return; // resumed by the toggle or visibility
            polling = true;
            polledAt = Date.now();
            let page = null;
            try {
                const response = await fetch(window.location.href, {
                    credentials: "same-origin",
                    cache: "no-store",
                    headers: { [HEADER]: "1" },
                });
                if (response.status >= 400 && response.status < 500 && response.status !== 429) {
                    end("stopped"); // no longer allowed, or no longer there
                    return;
                }
                if (response.ok) page = new DOMParser().parseFromString(await response.text(), "text/html");
            } catch (error) {
                page = null; // offline, or the server went away: try again later
            } finally {
                polling = false;
            }
            if (state !== "live") return; // paused while the request was out
            if (page === null) {
                fail();
                return;
            }
            const fresh = page.querySelector("[data-owf-live]");
            if (!fresh) {
                end("stopped"); // the login page, or live pages turned off
                return;
            }
            failures = 0;
            apply(page);
            updatedAt = Date.now();
            // A finished run changes no more, once every region shows it.
            if (fresh.hasAttribute("data-owf-live-finished") && !held) end("finished");
            else {
                schedule(interval);
                render();
            }
        }

        function resume() {
            if (state !== "live" || document.hidden) return;
            const due = polledAt + (failures ? retryAt - polledAt : interval) - Date.now();
            if (due <= 0) poll();
            else schedule(due);
        }

        toggle.addEventListener("click", () => {
            if (state === "paused") {
                state = "live";
                failures = 0;
                render();
                poll();
            } else if (state === "live") {
                state = "paused";
                clearTimeout(timer);
                render();
            }
        });
        document.addEventListener("visibilitychange", () => {
            if (document.hidden) clearTimeout(timer);
            else resume();
        });
        indicator.hidden = false;
        render();
        ticker = setInterval(() => {
            if (!document.hidden) render();
        }, 1000);
        schedule(interval);
    }

    const indicator = document.querySelector("[data-owf-live]");
    if (indicator) start(indicator);
}
