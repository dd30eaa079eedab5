"""What the browser test (test_browser.py) runs in the page to check it: contrast, columns, the journal's width."""

# Runs in the page: the contrast ratio (WCAG 2) of an element's text against what is behind it.
CONTRAST_JS = """
element => {
    const parse = value => {
        const m = value.match(/rgba?\\(([^)]+)\\)/);
        if (!m) return [0, 0, 0, 0];
        const parts = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
        return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
    };
    const over = (top, bottom) => [0, 1, 2].map(i => top[i] * top[3] + bottom[i] * (1 - top[3])).concat([1]);
    // The background the text is drawn on: the element's and its ancestors', composed.
    let layers = [];
    for (let node = element; node; node = node.parentElement) {
        const colour = parse(getComputedStyle(node).backgroundColor);
        if (colour[3] > 0) layers.push(colour);
        if (colour[3] >= 1) break;
    }
    let background = [255, 255, 255, 1];
    for (const layer of layers.reverse()) background = over(layer, background);
    const text = over(parse(getComputedStyle(element).color), background);
    const luminance = rgb => {
        const [r, g, b] = rgb.slice(0, 3).map(v => {
            v /= 255;
            return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
        });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const [a, b] = [luminance(text), luminance(background)].sort((x, y) => y - x);
    return (a + 0.05) / (b + 0.05);
}
"""

# Runs in the page: the list's columns that do not fit, each with why.
COLUMNS_JS = """
([viewportWidth, mustFit]) => {
    const problems = [];
    const results = document.querySelector('#changelist .results') || document.querySelector('#result_list');
    if (mustFit && results.scrollWidth > results.clientWidth + 1)
        problems.push(`the list scrolls sideways: ${results.scrollWidth} px of content in ${results.clientWidth} px`);
    for (const cell of document.querySelectorAll('#result_list th, #result_list td')) {
        if (cell.classList.contains('action-checkbox') || cell.classList.contains('action-checkbox-column')) continue;
        const name = (cell.className || cell.tagName).toString();
        const box = cell.getBoundingClientRect();
        if (mustFit && box.right > viewportWidth + 1)
            problems.push(`${name} ends at ${Math.round(box.right)} px, past the ${viewportWidth} px window`);
        // Cut off by a box that hides what overflows it (one that scrolls lets the user reach it).
        for (let box2 = cell.parentElement; box2; box2 = box2.parentElement) {
            const overflow = getComputedStyle(box2).overflowX;
            if (overflow === 'visible') continue;
            const edge = box2.getBoundingClientRect();
            const outside = box.right > edge.right + 1 || box.left < edge.left - 1;
            if ((overflow === 'hidden' || overflow === 'clip') && outside)
                problems.push(`${name} is cut off by ${box2.tagName.toLowerCase()}.${box2.className}`);
            break;
        }
        // Clipped: text wider than its cell, or a child (a badge, a time) cut by the cell's edge.
        if (cell.scrollWidth > cell.clientWidth + 1)
            problems.push(`${name}: its content (${cell.scrollWidth} px) is wider than its cell (${cell.clientWidth})`);
        for (const child of cell.querySelectorAll('*')) {
            const inner = child.getBoundingClientRect();
            if (inner.width && (inner.right > box.right + 1 || inner.left < box.left - 1))
                problems.push(`${name}: ${child.tagName.toLowerCase()}.${child.className} sticks out of its cell`);
        }
    }
    return problems;
}
"""

# Runs in the page: what of the journal (and the timeline) sticks out of the page's content box.
JOURNAL_JS = """
() => {
    const problems = [];
    const content = document.querySelector('#content').getBoundingClientRect();
    if (document.documentElement.scrollWidth > window.innerWidth + 1)
        problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} px`);
    for (const selector of ['.owf-journal th', '.owf-journal td', '.owf-tl-row']) {
        for (const cell of document.querySelectorAll(selector)) {
            const head = cell.closest('thead');
            // Visually hidden on a phone, where the cards name their cells.
            if (head && head.getBoundingClientRect().width <= 1) continue;
            const box = cell.getBoundingClientRect();
            if (box.right > content.right + 1)
                problems.push(`${selector} "${cell.textContent.trim().slice(0, 30)}…" ends at `
                              + `${Math.round(box.right)} px, past the content's ${Math.round(content.right)} px`);
        }
    }
    const wrap = document.querySelector('.owf-table-wrap');
    if (wrap && wrap.scrollWidth > wrap.clientWidth + 1)
        problems.push(`the journal scrolls sideways: ${wrap.scrollWidth} px in ${wrap.clientWidth} px`);
    return problems;
}
"""
