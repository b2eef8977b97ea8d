// The view's one script: served from this origin (the page's policy runs
// nothing inline). It keeps the pages that say so up to date.
"use strict";
