// The admin's lists on a phone: each cell is given its column's name (data-label), which the cards'
// CSS shows before the value (the names come from the header row, so they never drift from it), and the
// filters, shown before the cards, start folded.
(function () {
  "use strict";
  // On a phone the filters come first (cards.html): each folded, unless it holds a choice in use.
  if (window.matchMedia("(max-width: 767px)").matches) {
    for (const filter of document.querySelectorAll("#changelist-filter details")) {
      const chosen = filter.querySelector("li.selected");
      if (!chosen || chosen === filter.querySelector("li")) filter.open = false;
    }
  }
  const table = document.getElementById("result_list");
  if (!table) return;
  const names = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  for (const row of table.querySelectorAll("tbody tr")) {
    [...row.children].forEach((cell, index) => {
      if (names[index]) cell.dataset.label = names[index];
    });
  }
})();
