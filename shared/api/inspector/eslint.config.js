// ESLint for the web inspector's JavaScript (flat config). Run from the project's folder, which is the base path
// the file patterns below are relative to: `make lint`, or shared/api/inspector/node_modules/.bin/eslint -c this file.
import js from "@eslint/js";
import globals from "globals";

export default [
  { ignores: ["shared/api/inspector/app/json-e.js"] }, // a library's own build, vendored unchanged (actions.js)
  {
    files: ["shared/api/inspector/app/**/*.js"],
    ...js.configs.recommended,
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.browser },
  },
  {
    // Stricter than recommended: what catches a slip in code without types (equality, shadowing, use before
    // definition, promises), and one way to write the same thing.
    files: ["shared/api/inspector/app/**/*.js", "shared/api/inspector/tests/**/*.mjs"],
    rules: {
      eqeqeq: ["error", "smart"], "no-var": "error", "prefer-const": "error", "no-implicit-coercion": "error",
      "no-shadow": "error", "no-param-reassign": "error", "no-unused-expressions": "error", "no-else-return": "error",
      "no-use-before-define": ["error", { functions: false }], "consistent-return": "error", "no-console": "error",
      "prefer-template": "error", "object-shorthand": "error", "no-useless-concat": "error", "no-throw-literal": "error",
      "require-await": "error", "no-promise-executor-return": "error", "array-callback-return": "error",
      "no-constructor-return": "error", "no-self-compare": "error", "no-template-curly-in-string": "error",
      "no-unmodified-loop-condition": "error", "no-unreachable-loop": "error", "default-case-last": "error",
      "dot-notation": "error", "no-lonely-if": "error",
    },
  },
  {
    // ANSI escapes are control characters: matching them is what these modules are for.
    files: ["shared/api/inspector/app/ansi.js", "shared/api/inspector/app/logmodel.js",
      "shared/api/inspector/app/why.js"],
    rules: { "no-control-regex": "off" },
  },
  {
    files: ["shared/api/inspector/tests/**/*.mjs", "tests/acceptance/js/**/*.mjs"],
    ...js.configs.recommended,
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.node },
  },
];
