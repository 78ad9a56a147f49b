import js from '@eslint/js'
import globals from 'globals'
import reactHooks from 'eslint-plugin-react-hooks'
import reactRefresh from 'eslint-plugin-react-refresh'
import tseslint from 'typescript-eslint'
import { importX } from 'eslint-plugin-import-x'
import { createTypeScriptImportResolver } from 'eslint-import-resolver-typescript'
import { defineConfig, globalIgnores } from 'eslint/config'

// The dashboard's fences. A feature (src/features/<name>) may import lib/, components/ and the
// features named here, which sit below it; no two features import each other (a module both need
// goes down to lib/ or components/). lib/ and components/ import no feature and not app/; app/
// (routes, providers, the cluster stream) composes the features and may import any of them.
const featureImports = {
  auth: [],
  tokens: [],
  usage: [],
  machines: ['auth'],
  projects: ['auth'],
  jobs: ['auth', 'machines', 'projects'],
  queue: ['jobs'],
  experiments: ['jobs'],
  topology: ['jobs', 'machines'],
}
const featureZones = Object.entries(featureImports).map(([name, allowed]) => ({
  target: `./src/features/${name}`,
  from: './src/features',
  except: [`./${name}`, ...allowed.map((other) => `./${other}`)],
  message: `features/${name} may import lib/, components/ and ${allowed.map((other) => `features/${other}`).join(', ') || 'no other feature'} (featureImports in eslint.config.js).`,
}))
const sharedZone = {
  target: ['./src/lib', './src/components'],
  from: ['./src/features', './src/app'],
  message: 'lib/ and components/ sit below every feature and app/.',
}
// Tests of a feature may render it inside app/'s providers; its code may not reach up into app/.
const appZone = { target: './src/features', from: './src/app', message: 'A feature does not import app/.' }
const fences = (zones) => ['error', { basePath: import.meta.dirname, zones }]

export default defineConfig([
  globalIgnores(['dist', 'coverage']),
  {
    files: ['**/*.{ts,tsx}'],
    extends: [
      js.configs.recommended,
      tseslint.configs.recommended,
      reactHooks.configs.flat.recommended,
      reactRefresh.configs.vite,
      importX.flatConfigs.typescript,
    ],
    languageOptions: {
      ecmaVersion: 2022,
      globals: globals.browser,
    },
    settings: { 'import-x/resolver-next': [createTypeScriptImportResolver({ project: 'tsconfig.app.json' })] },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'import-x/no-cycle': 'error',
      'import-x/no-restricted-paths': fences([...featureZones, sharedZone, appZone]),
    },
  },
  {
    // Tests and test helpers export non-components freely.
    files: ['src/test/**', '**/*.test.{ts,tsx}'],
    rules: {
      'react-refresh/only-export-components': 'off',
      'import-x/no-restricted-paths': fences([...featureZones, sharedZone]),
    },
  },
])
