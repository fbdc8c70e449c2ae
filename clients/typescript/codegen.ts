// GraphQL Code Generator: schema.graphql + the Python client's queries.graphql -> src/generated/graphql.ts.
// Both clients run the same operations from that one file, so they read the same fields.
// Only typescript-operations and typed-document-node: typescript-operations 6 emits the enums
// and inputs it uses itself (adding the `typescript` plugin would declare them twice). String
// documents keep the `graphql` package out of the client's runtime.
import type { CodegenConfig } from "@graphql-codegen/cli";

const config: CodegenConfig = {
  overwrite: true,
  schema: "../../schema.graphql",
  documents: ["../python/queries.graphql"],
  generates: {
    "src/generated/graphql.ts": {
      plugins: ["typescript-operations", "typed-document-node"],
      config: {
        documentMode: "string",
        useTypeImports: true,
        enumsAsTypes: true,
        strictScalars: true,
        scalars: { DateTime: "string", JSON: "unknown" },
        avoidOptionals: { field: true, inputValue: false, object: true, defaultValue: false },
        dedupeFragments: true,
      },
    },
  },
};

export default config;
