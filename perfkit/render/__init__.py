"""The render layer: the view layer's numbers and figures as terminal text, markdown, the HTML report and
notebook output. Imports the layers below it, never the apps."""
