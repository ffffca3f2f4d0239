// The admin's lists on a phone: each cell is given its column's name (data-label), which the cards'
// CSS shows before the value. The names come from the header row, so they never drift from it.
(function () {
  "use strict";
  const table = document.getElementById("result_list");
  if (!table) return;
  const names = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  for (const row of table.querySelectorAll("tbody tr")) {
    [...row.children].forEach((cell, index) => {
      if (names[index]) cell.dataset.label = names[index];
    });
  }
})();
