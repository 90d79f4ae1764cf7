// ESLint for the web inspector's JavaScript (flat config). Run from the project's folder, which is the base path
// the file patterns below are relative to: `make lint`, or tools/inspector/node_modules/.bin/eslint -c this file.
import js from "@eslint/js";
import globals from "globals";

export default [
  {
    files: ["shared/api/static/inspector/**/*.js"],
    ...js.configs.recommended,
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.browser },
  },
  {
    // ANSI escapes are control characters: matching them is what these modules are for.
    files: ["shared/api/static/inspector/ansi.js", "shared/api/static/inspector/logmodel.js",
      "shared/api/static/inspector/why.js"],
    rules: { "no-control-regex": "off" },
  },
  {
    files: ["tests/unit/js/**/*.mjs", "tests/acceptance/js/**/*.mjs"],
    ...js.configs.recommended,
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.node },
  },
];
